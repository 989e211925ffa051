"""Calls a user gets wrong never end, corrupt or hang the interpreter: each gives a
``kiln.KilnError`` subclass naming the kernel and the argument. Where a failure could end the
process (a write outside memory kiln did not allocate, a call that exits), the call runs in a
child interpreter and the test reads how the child ended."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import kiln


def run_child(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter; it prints ``SURVIVED`` as its last act."""
    script = textwrap.dedent(code) + "\nimport gc; gc.collect()\nprint('SURVIVED', flush=True)\n"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def assert_survived(child: subprocess.CompletedProcess):
    assert child.returncode == 0 and "SURVIVED" in child.stdout, (
        f"exit {child.returncode}\nstdout:\n{child.stdout[-2000:]}\nstderr:\n{child.stderr[-2000:]}"
    )


ADD_ONE = """
#include <metal_stdlib>
using namespace metal;
kernel void add1(device float* b [[buffer(0)]], uint i [[thread_position_in_grid]]) { b[i] += 1.0f; }
kernel void read_only(const device float* b [[buffer(0)]], device float* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) { out[i] = 2.0f * b[i]; }
"""


# -- memory kiln did not allocate -------------------------------------------------------------

@pytest.mark.parametrize("n", [64, 1000, 100_000])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("init", [None, 0.0])
def test_an_mlx_dropin_output_written_past_its_end_is_a_fault_and_the_process_lives(n, dtype, init):
    pytest.importorskip("mlx.core")
    # Outputs are kiln's own, copied into MLX arrays after a clean run; with init_value they are
    # MLX's memory, which kiln writes in place (through a guarded copy) and leaves as it was.
    said = "byte 0 past the end" if init is None else "left as they were"
    child = run_child(f"""
        import kiln, kiln.mlx
        kiln.mlx.install(force=True)
        import mlx.core as mx
        k = mx.fast.metal_kernel(name="past_end", input_names=["a"], output_names=["out"],
                                 source="uint e = thread_position_in_grid.x; out[e + 1] = a[e];")
        a = mx.ones(({n},), dtype=mx.{dtype})
        try:
            k(inputs=[a], grid=({n}, 1, 1), threadgroup=(64, 1, 1), output_shapes=[({n},)],
              output_dtypes=[mx.{dtype}], init_value={init})
        except kiln.KernelFaultError as e:
            assert "past_end" in str(e) and {said!r} in str(e), e
            print("FAULT", flush=True)
        # kiln goes on: the same kernel written correctly.
        ok = mx.fast.metal_kernel(name="in_bounds", input_names=["a"], output_names=["out"],
                                  source="uint e = thread_position_in_grid.x; out[e] = a[e] + 1;")
        (out,) = ok(inputs=[a], grid=({n}, 1, 1), threadgroup=(64, 1, 1), output_shapes=[({n},)],
                    output_dtypes=[mx.float32])
        assert float(mx.sum(out).item()) == 2 * {n}
    """)
    assert_survived(child)
    assert "FAULT" in child.stdout


def test_an_in_place_buffer_smaller_than_the_grid_is_a_fault_naming_the_buffer():
    child = run_child(f"""
        import numpy as np, kiln
        lib = kiln.metal_library("adds", {ADD_ONE!r})
        b = np.arange(8, dtype=np.float32)
        try:
            lib.dispatch("add1", [b], threads=(4096, 1, 1), threadgroup=(64, 1, 1))
        except kiln.KernelFaultError as e:
            assert "buffer slot 0" in str(e) and "left as they were" in str(e), e
            print("FAULT", flush=True)
        assert (b == np.arange(8, dtype=np.float32)).all(), b
    """)
    assert_survived(child)
    assert "FAULT" in child.stdout


def test_strided_in_place_views_write_exactly_their_elements(rng):
    lib = kiln.metal_library("adds", ADD_ONE)
    base = rng.normal(size=16).astype(np.float32)
    want = base.copy()
    want[::2] += 1
    lib.dispatch("add1", [base[::2]], threads=(8, 1, 1), threadgroup=(8, 1, 1))
    np.testing.assert_array_equal(base, want)
    base = rng.normal(size=16).astype(np.float32)
    want = base.copy()
    want[::-1] += 1
    lib.dispatch("add1", [base[::-1]], threads=(16, 1, 1), threadgroup=(16, 1, 1))
    np.testing.assert_array_equal(base, want)
    # A strided read-only buffer is read as exactly its elements too.
    x = rng.normal(size=(6, 5)).astype(np.float32)
    (out,) = lib.dispatch("read_only", [x[:, 1], kiln.Output((6,), np.float32)], threads=(6, 1, 1),
                          threadgroup=(6, 1, 1))
    np.testing.assert_array_equal(out, 2 * x[:, 1])


def test_a_read_only_array_is_refused_where_the_kernel_writes_and_read_where_it_does_not(rng):
    lib = kiln.metal_library("adds", ADD_ONE)
    b = rng.normal(size=8).astype(np.float32)
    b.setflags(write=False)
    with pytest.raises(kiln.InvalidArgumentError, match=r"adds:add1.*buffer 0 \(b\).*read-only"):
        lib.dispatch("add1", [b], threads=(8, 1, 1), threadgroup=(8, 1, 1))
    (out,) = lib.dispatch("read_only", [b, kiln.Output((8,), np.float32)], threads=(8, 1, 1), threadgroup=(8, 1, 1))
    np.testing.assert_array_equal(out, 2 * b)


def test_big_endian_arrays_are_read_by_value_and_updated_in_place(rng):
    x = rng.normal(size=32).astype(np.float32)
    k = kiln.metal_kernel("twice", ["inp"], ["out"], "uint i = thread_position_in_grid.x; out[i] = 2 * inp[i];")
    (out,) = k(inputs=[x.astype(">f4")], output_shapes=[x.shape], output_dtypes=[np.float32], grid=(32, 1, 1),
               threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(out, 2 * x)
    lib = kiln.metal_library("adds", ADD_ONE)
    b = x.astype(">f4")
    lib.dispatch("add1", [b], threads=(32, 1, 1), threadgroup=(32, 1, 1))
    assert b.dtype == np.dtype(">f4")
    np.testing.assert_array_equal(b, x + 1)


def test_an_array_cannot_be_resized_from_another_thread_during_a_call():
    lib = kiln.metal_library("spin", """
        #include <metal_stdlib>
        using namespace metal;
        kernel void slow(device float* b [[buffer(0)]], uint i [[thread_position_in_grid]]) {
            float v = b[i];
            for (int k = 0; k < 200000; ++k) { v = v * 0.999999f + 1e-7f; }
            b[i] = v;
        }
    """)
    b = np.ones(1 << 12, np.float32)
    lib.dispatch("slow", [b[:64]], threads=(64, 1, 1), threadgroup=(64, 1, 1))  # compiled before timing
    refused = []

    def resize():
        time.sleep(0.05)
        try:
            b.resize(1 << 20, refcheck=False)
        except ValueError as e:
            refused.append(str(e))

    t = threading.Thread(target=resize)
    t.start()
    lib.dispatch("slow", [b], threads=(b.size, 1, 1), threadgroup=(64, 1, 1))
    t.join()
    assert refused, "the resize went through while kiln held the array"
    assert b.size == 1 << 12 and np.isfinite(b).all()


# -- the interpreter never ends --------------------------------------------------------------

@pytest.mark.parametrize("call", ["exit(7)", "abort()", "__builtin_abort()", "__builtin_trap()", "quick_exit(3)",
                                  "_Exit(1)", "raise(9)", "kill(0, 9)"])
def test_calls_that_end_the_process_are_compile_errors_at_the_users_line(call):
    child = run_child(f"""
        import numpy as np, kiln
        k = kiln.metal_kernel("ender", ["a"], ["out"], "uint i = thread_position_in_grid.x;\\nout[i] = a[i];\\n{call};")
        try:
            k(inputs=[np.ones(4, np.float32)], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1),
              threadgroup=(4, 1, 1))
        except kiln.CompileError as e:
            assert "ender" in str(e) and "3" in str(e), e
            print("REFUSED", flush=True)
    """)
    assert_survived(child)
    assert "REFUSED" in child.stdout


def test_an_unterminated_comment_is_a_compile_error_not_a_panic():
    child = run_child("""
        import numpy as np, kiln
        lib = kiln.metal_library("open_comment", '''
            #include <metal_stdlib>
            using namespace metal;
            kernel void f(device float* b [[buffer(0)]], uint i [[thread_position_in_grid]]) {
                b[i] = 1.0f; /* never closed
            }
        ''')
        try:
            lib.dispatch("f", [np.zeros(4, np.float32)], threads=(4, 1, 1), threadgroup=(4, 1, 1))
        except kiln.CompileError as e:
            print("REFUSED", flush=True)
    """)
    assert_survived(child)
    assert "REFUSED" in child.stdout


def test_kiln_errors_cover_internal_errors():
    assert issubclass(kiln.InternalError, kiln.KilnError)
    assert issubclass(kiln.InternalError, RuntimeError)


# -- arguments: KilnErrors naming the kernel and the argument ----------------------------------

def _twice():
    return kiln.metal_kernel("twice", ["inp"], ["out"], "uint i = thread_position_in_grid.x; out[i] = 2 * inp[i];")


def _call(**override):
    keywords = dict(inputs=[np.ones(4, np.float32)], output_shapes=[(4,)], output_dtypes=[np.float32],
                    grid=(4, 1, 1), threadgroup=(4, 1, 1))
    keywords.update(override)
    return _twice()(**keywords)


@pytest.mark.parametrize("override, cls, pattern", [
    (dict(grid=(-1, 1, 1)), kiln.InvalidArgumentError, r"\[metal_kernel twice\] grid"),
    (dict(grid=(4, 1)), kiln.InvalidArgumentError, r"\[metal_kernel twice\] grid"),
    (dict(grid=(2**32, 1, 1)), kiln.InvalidArgumentError, r"\[metal_kernel twice\] grid"),
    (dict(threadgroup=(4.5, 1, 1)), kiln.InvalidArgumentError, r"\[metal_kernel twice\] threadgroup"),
    (dict(output_shapes=[(-4,)]), kiln.InvalidArgumentError, r"\[metal_kernel twice\] output_shapes\[0\]"),
    (dict(output_shapes=[4]), kiln.InvalidArgumentError, r"\[metal_kernel twice\] output_shapes\[0\]"),
    (dict(output_dtypes=[np.complex64]), kiln.UnsupportedDTypeError, r"\[metal_kernel twice\] output_dtypes\[0\]"),
    (dict(output_dtypes=["nope"]), kiln.UnsupportedDTypeError, r"\[metal_kernel twice\] output_dtypes\[0\]"),
    (dict(device="tpu"), kiln.InvalidArgumentError, r"\[metal_kernel twice\] device"),
    (dict(template=[("N", 2**40)]), kiln.InvalidArgumentError, r"\[metal_kernel twice\] template 'N'"),
    (dict(template=[("N", "x")]), kiln.InvalidArgumentError, r"\[metal_kernel twice\].*template argument 'N'"),
    (dict(template=[("N",)]), kiln.InvalidArgumentError, r"\[metal_kernel twice\] template"),
    (dict(init_value="zero"), kiln.InvalidArgumentError, r"\[metal_kernel twice\] init_value"),
    (dict(timeout=-1), kiln.InvalidArgumentError, r"\[metal_kernel twice\] timeout"),
    (dict(inputs=[np.ones(4, np.complex64)]), kiln.UnsupportedDTypeError, r"\[metal_kernel twice\] inputs\[0\] \(inp\)"),
    (dict(inputs=[object()]), kiln.UnsupportedDTypeError, r"\[metal_kernel twice\] inputs\[0\] \(inp\)"),
    (dict(inputs=[2**70]), kiln.InvalidArgumentError, r"\[metal_kernel twice\] inputs\[0\] \(inp\)"),
    (dict(inputs=5), kiln.InvalidArgumentError, r"\[metal_kernel twice\] inputs"),
])
def test_bad_arguments_are_kiln_errors_naming_the_kernel_and_the_argument(override, cls, pattern):
    with pytest.raises(cls, match=pattern):
        _call(**override)


@pytest.mark.parametrize("override", [
    dict(inputs=(np.arange(4, dtype=np.float32),)),
    dict(inputs=(x for x in [np.arange(4, dtype=np.float32)])),
    dict(inputs=[[0.0, 1.0, 2.0, 3.0]]),
    dict(inputs=[np.arange(4, dtype=">f4")]),
    dict(inputs=[np.arange(8, dtype=np.float32)[::2] / 2]),
    dict(grid=np.array([4, 1, 1]), threadgroup=[4, 1, 1]),
    dict(output_shapes=[np.array([4])], output_dtypes=["float32"]),
    dict(output_shapes=((np.int32(4),),), output_dtypes=[np.dtype("float32")]),
    dict(template=[("N", np.int32(3)), ("B", np.bool_(True))], init_value=np.float32(0.5)),
    dict(timeout=np.float64(30.0), device="cpu", verbose=np.bool_(False)),
])
def test_arguments_of_other_python_types_are_taken_as_their_values(override):
    # Iterables and NumPy scalars stand for lists and ints, other byte orders and strided views
    # are read through copies: the call checks and reads each argument once, in the extension.
    want = 2 * (np.arange(4, dtype=np.float32) if "inputs" in override else np.ones(4, np.float32))
    (out,) = _call(**override)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, want)


def test_names_must_be_identifiers():
    with pytest.raises(kiln.InvalidArgumentError, match=r"input name .*not an identifier"):
        kiln.metal_kernel("inject", ["inp) { } void f(int x"], ["out"], "out[0] = 1;")
    with pytest.raises(kiln.InvalidArgumentError, match='output name "1out"'):
        kiln.metal_kernel("digit", ["inp"], ["1out"], "out[0] = 1;")
    with pytest.raises(kiln.InvalidArgumentError, match="given twice"):
        kiln.metal_kernel("twice_named", ["x"], ["x"], "x[0] = 1;")


def test_dispatch_arguments_are_kiln_errors_naming_the_function():
    lib = kiln.metal_library("adds", ADD_ONE)
    b = np.zeros(8, np.float32)
    cases = [
        (dict(threads=(-8, 1, 1)), r"adds:add1\] threads"),
        (dict(threads=(8, 1, 1), threadgroup=(8, -1, 1)), r"adds:add1\] threadgroup"),
        (dict(threads=(8, 1, 1), threadgroup_memory=[-1]), r"adds:add1\] threadgroup_memory"),
        (dict(threads=(8, 1, 1), constants=[1]), r"adds:add1\] constants"),
        (dict(threads=(8, 1, 1), device="tpu"), r"adds:add1\] device"),
        (dict(threads=(8, 1, 1), timeout=0), r"adds:add1\] timeout"),
    ]
    for extra, pattern in cases:
        keywords = dict(threadgroup=(8, 1, 1))
        keywords.update(extra)
        with pytest.raises(kiln.InvalidArgumentError, match=pattern):
            lib.dispatch("add1", [b], **keywords)


# -- hangs and leftovers ----------------------------------------------------------------------

SPIN = "uint i = thread_position_in_grid.x; while (true) { if (inp[i] < -1e30f) break; } out[i] = inp[i];"


def test_a_kernel_call_stops_at_its_timeout():
    k = kiln.metal_kernel("spin_forever", ["inp"], ["out"], SPIN)
    x = np.ones(4, np.float32)
    start = time.monotonic()
    with pytest.raises(kiln.TimeoutError, match="spin_forever"):
        k(inputs=[x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1), threadgroup=(4, 1, 1),
          timeout=0.5)
    # The first call also compiled the kernel; the limit counts the run only.
    start = time.monotonic()
    with pytest.raises(kiln.TimeoutError):
        k(inputs=[x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1), threadgroup=(4, 1, 1),
          timeout=0.5)
    assert time.monotonic() - start < 30


def test_a_dispatch_stops_at_its_timeout():
    lib = kiln.metal_library("spin", """
        #include <metal_stdlib>
        using namespace metal;
        kernel void forever(device float* b [[buffer(0)]], uint i [[thread_position_in_grid]]) {
            while (b[i] > -1e30f) { }
        }
    """)
    b = np.ones(4, np.float32)
    with pytest.raises(kiln.TimeoutError, match="spin:forever"):
        lib.dispatch("forever", [b], threads=(4, 1, 1), threadgroup=(4, 1, 1), timeout=0.5)
    np.testing.assert_array_equal(b, 1)


def test_a_zero_size_grid_is_refused_while_an_output_is_uninitialised():
    with pytest.raises(kiln.InvalidArgumentError, match=r'twice\].*zero dimension.*"out"'):
        _call(grid=(0, 1, 1))
    (out,) = _call(grid=(0, 1, 1), init_value=3.0)
    np.testing.assert_array_equal(out, 3.0)
    (empty,) = _call(grid=(0, 1, 1), output_shapes=[(0,)])
    assert empty.shape == (0,)
    lib = kiln.metal_library("adds", ADD_ONE)
    with pytest.raises(kiln.InvalidArgumentError, match=r"zero dimension.*buffer 1"):
        lib.dispatch("read_only", [np.ones(4, np.float32), kiln.Output((4,), np.float32)], threads=(0, 1, 1),
                     threadgroup=(4, 1, 1))


def test_bad_op_arguments_are_kiln_errors_naming_the_op():
    from kiln import ops

    x, w = np.ones((4, 8), np.float32), np.ones(8, np.float32)
    cases = [
        (lambda: ops.rms_norm(x, w, "a"), kiln.InvalidArgumentError, r"\[rms_norm\] eps"),
        (lambda: ops.rms_norm(x.astype(np.float64), w, 1e-5), kiln.UnsupportedDTypeError, r"\[rms_norm\] array"),
        (lambda: ops.rope(x, -2, traditional=False, base=1e4, scale=1.0, offset=0), kiln.InvalidArgumentError,
         r"\[rope\] dims"),
        (lambda: ops.rope(x, 8, traditional=False, base=1e4, scale=1.0, offset=2**70), kiln.InvalidArgumentError,
         r"\[rope\] offset"),
        (lambda: ops.softmax(object()), kiln.UnsupportedDTypeError, r"\[softmax\] array argument 0"),
        (lambda: ops.softmax(x, axis=0), kiln.InvalidArgumentError, r"\[softmax\]"),
        (lambda: ops.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None], scale="a"),
         kiln.InvalidArgumentError, r"\[scaled_dot_product_attention\] scale"),
        (lambda: ops.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None], scale=1.0,
                                                  mask="full"), kiln.InvalidArgumentError, "mask"),
        (lambda: ops.scatter_add(x, np.zeros(4, np.int32), -1), kiln.InvalidArgumentError, r"\[scatter_add\] bins"),
        (lambda: ops.overlap_add(x, -3), kiln.InvalidArgumentError, r"\[overlap_add\] hop"),
    ]
    for call, cls, pattern in cases:
        with pytest.raises(cls, match=pattern):
            call()


def test_bad_factory_arguments_are_kiln_errors():
    cases = [
        (lambda: kiln.metal_kernel("k", "inp", ["out"], "out[0] = inp[0];"), r"\[metal_kernel k\] input_names"),
        (lambda: kiln.metal_kernel(3, ["inp"], ["out"], "out[0] = inp[0];"), r"\[metal_kernel\] name"),
        (lambda: kiln.metal_kernel("k", ["inp"], ["out"], None), r"\[metal_kernel k\] source"),
        (lambda: kiln.metal_kernel("k", ["inp"], ["out"], "out[0] = 1;", header=5), r"\[metal_kernel k\] header"),
        (lambda: kiln.metal_kernel("k", [1], ["out"], "out[0] = 1;"), r"\[metal_kernel k\] input_names\[0\]"),
        (lambda: kiln.metal_kernel("k", ["inp"], ["out"], "out[0] = 1;", compile_options={"math_mode": "x"}),
         r"\[metal_kernel k\] expected math_mode"),
        (lambda: kiln.metal_library("l", None), r"\[metal_library l\] source"),
        (lambda: _twice().compile_cuda(inputs=[np.ones(4, np.float32)], output_shapes=[(4,)],
                                       output_dtypes=[np.float32], arch="x"), r"\[metal_kernel twice\] arch"),
    ]
    for call, pattern in cases:
        with pytest.raises(kiln.InvalidArgumentError, match=pattern):
            call()
