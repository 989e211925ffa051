"""`kiln.metal_library`: whole .metal files with buffer slots, function constants, threadgroup
memory, in/out buffers and both dispatch kinds, on NumPy arrays."""

import numpy as np
import pytest

import kiln

from conftest import assert_close, random_array

SOURCE = """
#include <metal_stdlib>
using namespace metal;

constant bool use_bias [[function_constant(0)]];
constant float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};

struct Params { uint n; float scale; };

kernel void axpb(device const float* x [[buffer(0)]],
                 device float* y [[buffer(1)]],
                 constant Params& p [[buffer(2)]],
                 device const float* bias [[buffer(3), function_constant(use_bias)]],
                 uint i [[thread_position_in_grid]]) {
    if (i >= p.n) return;
    float v = x[i] * p.scale * table[i % 4];
    if (use_bias) v += bias[i];
    y[i] = v;
}

kernel void block_sum(device const float* x [[buffer(0)]],
                      device float* sums [[buffer(1)]],
                      threadgroup float* scratch [[threadgroup(0)]],
                      uint tid [[thread_position_in_threadgroup]],
                      uint group [[threadgroup_position_in_grid]],
                      uint n [[threads_per_threadgroup]]) {
    scratch[tid] = x[group * n + tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = n / 2; s > 0; s /= 2) {
        if (tid < s) scratch[tid] += scratch[tid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) sums[group] = scratch[0];
}
"""

LIB = kiln.metal_library("lib_test", SOURCE)


@pytest.mark.parametrize("use_bias", [False, True])
def test_function_constants_params_struct_and_file_scope_tables(rng, use_bias):
    n = 300
    x = random_array(rng, (n,), np.float32)
    bias = random_array(rng, (n,), np.float32)
    params = np.array([(n, 0.5)], dtype=[("n", np.uint32), ("scale", np.float32)]).tobytes()
    (y,) = LIB.dispatch("axpb", [x, kiln.Output((n,), np.float32), params, bias], threads=(n, 1, 1),
                        threadgroup=(64, 1, 1), constants={0: use_bias})
    want = x.astype(np.float64) * 0.5 * np.tile([1, 2, 3, 4], n // 4)
    if use_bias:
        want += bias
    assert_close(y, want, np.float32)


def test_dispatch_by_threadgroups_with_threadgroup_memory(rng):
    x = random_array(rng, (16 * 128,), np.float32)
    (sums,) = LIB.dispatch("block_sum", [x, kiln.Output((16,), np.float32)], threadgroups=(16, 1, 1),
                           threadgroup=(128, 1, 1), threadgroup_memory=[128 * 4])
    assert_close(sums, x.reshape(16, 128).astype(np.float64).sum(1), np.float32)


def test_caller_buffers_are_written_in_place(rng):
    n = 100
    x = random_array(rng, (n,), np.float32)
    y = np.full(n, np.nan, np.float32)
    params = np.array([(n, 2.0)], dtype=[("n", np.uint32), ("scale", np.float32)]).tobytes()
    assert LIB.dispatch("axpb", [x, y, params, x], threads=(n, 1, 1), threadgroup=(32, 1, 1),
                        constants={"use_bias": False}) == []
    assert_close(y, x.astype(np.float64) * 2 * np.tile([1, 2, 3, 4], n // 4), np.float32)


def test_errors_name_the_library_and_function(rng):
    with pytest.raises(kiln.KilnError, match="lib_test"):
        LIB.dispatch("no_such_function", [np.ones(4, np.float32)], threads=(4, 1, 1), threadgroup=(4, 1, 1))
    with pytest.raises(ValueError):
        LIB.dispatch("axpb", [], threadgroup=(4, 1, 1))


def test_a_library_file_with_its_headers_and_defines(rng, tmp_path):
    # A file as libraries ship them: a sibling header included by a quoted name, another from
    # an include directory by an angled one, and a macro the library's build defines.
    (tmp_path / "kernels").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "kernels" / "scale.h").write_text("inline float scaled(float v) { return v * SCALE; }\n")
    (tmp_path / "inc" / "offset.h").write_text("constant float kOffset = 0.5f;\n")
    (tmp_path / "kernels" / "lib.metal").write_text(
        "#include <metal_stdlib>\n#include \"scale.h\"\n#include <offset.h>\nusing namespace metal;\n"
        "kernel void f(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
        "              uint i [[thread_position_in_grid]]) {\n"
        "#if HAS_OFFSET\n  y[i] = scaled(x[i]) + kOffset;\n#else\n  y[i] = scaled(x[i]);\n#endif\n}\n")
    x = random_array(rng, (64,), np.float32)
    for has_offset, offset in ((True, 0.5), (False, 0.0)):
        lib = kiln.metal_library_file(tmp_path / "kernels" / "lib.metal", include_dirs=[tmp_path / "inc"],
                                      defines={"SCALE": 3.0, "HAS_OFFSET": has_offset})
        assert lib.name == "lib.metal"
        (y,) = lib.dispatch("f", [x, kiln.Output((64,), np.float32)], threads=(64, 1, 1), threadgroup=(32, 1, 1))
        assert_close(y, x.astype(np.float64) * 3.0 + offset, np.float32)
    # A header found nowhere is a compile error naming it.
    lib = kiln.metal_library_file(tmp_path / "kernels" / "lib.metal", defines={"SCALE": 1})
    with pytest.raises(kiln.KilnError, match="offset.h"):
        lib.dispatch("f", [x, kiln.Output((64,), np.float32)], threads=(64, 1, 1), threadgroup=(32, 1, 1))


@pytest.mark.parametrize("defines", [{"not a name": 1}, {"X": [1]}, {"X": "a\nb"}, [("X",)], 7])
def test_bad_defines_are_argument_errors(defines):
    with pytest.raises(kiln.InvalidArgumentError, match="defines"):
        kiln.metal_library("bad_defines", SOURCE, defines=defines)


def test_a_missing_library_file_is_an_argument_error(tmp_path):
    with pytest.raises(kiln.InvalidArgumentError, match="cannot read"):
        kiln.metal_library_file(tmp_path / "nowhere.metal")
