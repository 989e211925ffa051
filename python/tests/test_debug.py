"""Debugging a kernel from Python: `kiln.debug_buffer` names the slots of MLX's extra debug
output, and `os_log` lines from CPU kernels reach the process's stderr, where pytest's capfd
sees them."""

import numpy as np
import pytest

import kiln

# Each thread sums and takes the max of its 4 inputs and records where the max was.
PARTIALS = """
    uint tid = thread_position_in_grid.x;
    float s = 0.0f, m = -INFINITY;
    uint at = 0;
    for (uint j = 0; j < 4; ++j) {
        float v = x[tid * 4 + j];
        s += v;
        if (v > m) { m = v; at = j; }
        RUNNING
    }
    out[tid] = s;
    dbg[(tid * DBG_RECORDS + 0) * DBG_SLOTS + DBG_SUM] = s;
    dbg[(tid * DBG_RECORDS + 0) * DBG_SLOTS + DBG_MAX] = m;
    dbg[(tid * DBG_RECORDS + 0) * DBG_SLOTS + DBG_IDX] = float(at);
"""


def test_debug_buffer_names_the_slots_of_a_kernel_output():
    rng = np.random.default_rng(0xDB6)
    threads = 48
    x = rng.standard_normal(threads * 4).astype(np.float32)
    dbg = kiln.debug_buffer(["sum", "max", "idx"], threads=threads)
    kernel = kiln.metal_kernel("partials", ["x"], ["out", "dbg"], PARTIALS.replace("RUNNING", ""),
                               header=dbg.header())
    out, raw = kernel(inputs=[x], output_shapes=[(threads,), dbg.shape], output_dtypes=[np.float32, dbg.dtype],
                      grid=(threads, 1, 1), threadgroup=(16, 1, 1))
    assert dbg.shape == (threads * 3,) and dbg.stride == 3 and raw.shape == dbg.shape
    values = dbg.read(raw)
    groups = x.reshape(threads, 4).astype(np.float64)
    np.testing.assert_allclose(values["sum"], groups.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, groups.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(values["max"], groups.max(axis=1).astype(np.float32))
    np.testing.assert_array_equal(values["idx"], groups.argmax(axis=1).astype(np.float32))
    assert list(values) == ["sum", "max", "idx"]
    assert all(v.shape == (threads,) for v in values.values())


def test_records_per_thread_and_the_table():
    rng = np.random.default_rng(0x7AB1E)
    threads = 8
    x = rng.standard_normal(threads * 4).astype(np.float32)
    dbg = kiln.debug_buffer(["running", "sum", "max", "idx"], threads=(threads, 1, 1), per_thread=4)
    running = "dbg[(tid * DBG_RECORDS + j) * DBG_SLOTS + DBG_RUNNING] = s;"
    kernel = kiln.metal_kernel("records", ["x"], ["out", "dbg"], PARTIALS.replace("RUNNING", running),
                               header=dbg.header())
    _, raw = kernel(inputs=[x], output_shapes=[(threads,), dbg.shape], output_dtypes=[np.float32, dbg.dtype],
                    grid=(threads, 1, 1), threadgroup=(4, 1, 1))
    values = dbg.read(raw, limit=6)
    groups = x.reshape(threads, 4).astype(np.float32)
    assert values["running"].shape == (threads, 4)
    np.testing.assert_allclose(values["running"], np.cumsum(groups, axis=1), rtol=1e-5, atol=1e-6)
    # Records 1..3 of the per-thread slots were never written: the CPU emulator's poison (NaN).
    if raw.dtype == np.float32:
        assert np.isnan(values["sum"][:, 1:]).all()
    table = str(values).splitlines()
    assert table[0].split() == ["thread", "record", "running", "sum", "max", "idx"]
    first = table[1].split()
    assert first[:2] == ["0", "0"]
    assert float(first[2]) == pytest.approx(float(groups[0, 0]), rel=1e-5)
    assert float(first[3]) == pytest.approx(float(groups[0].sum()), rel=1e-5)
    assert table[2].split()[3] == "nan"
    assert len(table) == 1 + 6 + 1 and table[-1] == f"... {threads * 4 - 6} more"


def test_debug_buffer_in_a_library_dispatch():
    rng = np.random.default_rng(0x11B)
    source = """
    #include <metal_stdlib>
    using namespace metal;
    """ + kiln.debug_buffer(["twice", "tid"], threads=16).header() + """
    kernel void twice(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      device float* dbg [[buffer(2)]], uint tid [[thread_position_in_grid]]) {
        out[tid] = 2.0f * x[tid];
        dbg[tid * DBG_SLOTS + DBG_TWICE] = out[tid];
        dbg[tid * DBG_SLOTS + DBG_TID] = float(tid);
    }
    """
    dbg = kiln.debug_buffer(["twice", "tid"], threads=16)
    x = rng.standard_normal(16).astype(np.float32)
    lib = kiln.metal_library("dbg_lib", source)
    out, raw = lib.dispatch("twice", [x, kiln.Output((16,), np.float32), dbg.output()], threads=(16, 1, 1),
                            threadgroup=(8, 1, 1))
    values = dbg.read(raw)
    np.testing.assert_array_equal(values["twice"], 2.0 * x)
    np.testing.assert_array_equal(values["tid"], np.arange(16, dtype=np.float32))


def test_debug_buffer_refuses_bad_slots_and_sizes():
    with pytest.raises(kiln.InvalidArgumentError, match="not an identifier"):
        kiln.debug_buffer(["a b"], threads=4)
    with pytest.raises(kiln.InvalidArgumentError, match="repeat"):
        kiln.debug_buffer(["a", "a"], threads=4)
    with pytest.raises(kiln.InvalidArgumentError, match="positive"):
        kiln.debug_buffer(["a"], threads=0)
    dbg = kiln.debug_buffer(["a", "b"], threads=4)
    with pytest.raises(kiln.InvalidArgumentError, match="holds 7 values"):
        dbg.read(np.zeros(7, np.float32))
    with pytest.raises(kiln.InvalidArgumentError, match="no slot 'c'"):
        dbg.slot("c")
    assert dbg.slot("b") == 1
    assert "constant uint DBG_B = 1;" in dbg.header()


def test_os_log_lines_reach_stderr_for_capfd(capfd):
    rng = np.random.default_rng(0x105)
    x = rng.standard_normal(8).astype(np.float32)
    kernel = kiln.metal_kernel("logs", ["x"], ["out"], """
        uint i = thread_position_in_grid.x;
        if (i % 3 == 0) {
            os_log_default.log_info("x[%u]=%.4f", i, x[i]);
        }
        out[i] = x[i];
    """)
    (out,) = kernel(inputs=[x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(8, 1, 1),
                    threadgroup=(4, 1, 1))
    np.testing.assert_array_equal(out, x)
    err = capfd.readouterr().err
    got = [line for line in err.splitlines() if line.startswith("[logs ")]
    want = [f"[logs tg({i // 4},0,0) t({i % 4},0,0)] info: x[{i}]={float(x[i]):.4f}" for i in (0, 3, 6)]
    assert got == want
