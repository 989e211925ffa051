"""MLX's own custom-kernel tests (the reference spec's §5), on NumPy arrays through the CPU
emulator, each against a NumPy reference on fresh random inputs."""

import ml_dtypes
import numpy as np
import pytest

import kiln

from conftest import assert_close


def test_basic_copy_of_a_small_input_in_constant_space(rng):
    a = rng.normal(size=(2, 2)).astype(np.float32)
    k = kiln.metal_kernel("basic", ["a"], ["out1"], "uint elem = thread_position_in_grid.x; out1[elem] = a[elem];")
    (out,) = k(inputs=[a], output_shapes=[(2, 2)], output_dtypes=[np.float32], grid=(4, 1, 1), threadgroup=(2, 1, 1))
    assert isinstance(out, np.ndarray) and out.shape == (2, 2) and out.dtype == np.float32
    np.testing.assert_array_equal(out, a)


def test_args_of_every_kind_with_bool_int_and_dtype_templates(rng):
    a = rng.normal(size=(3, 6)).astype(np.float32)
    c = rng.normal(size=(2, 2)).astype(ml_dtypes.bfloat16)
    source = """
        uint elem = thread_position_in_grid.x;
        T tmp = a[0];
        if (e) {
            out1[elem] = a[1] + b[2] + c[3] + d + f;
        } else {
            out1[elem] = 1;
        }
        out2[elem] = a[1] + b[2] + c[1] - d;
    """
    k = kiln.metal_kernel("arg_test", ["a", "b", "c", "d"], ["out1", "out2"], source)
    out1, out2 = k(
        inputs=[a, [3, 4, 5], c, 7.3],
        template=[("e", True), ("f", 3), ("T", np.float16)],
        grid=(6, 1, 1), threadgroup=(2, 1, 1),
        output_shapes=[(3, 2), (3, 2)], output_dtypes=[np.float32, np.int32],
    )
    cf = c.astype(np.float32)
    want1 = np.float32(a.flat[1]) + np.float32(5) + cf.flat[3] + np.float32(7.3) + np.float32(3)
    np.testing.assert_allclose(out1, np.full((3, 2), want1), rtol=1e-6)
    want2 = np.trunc(np.float32(a.flat[1]) + np.float32(5) + cf.flat[1] - np.float32(7.3))
    np.testing.assert_array_equal(out2, np.full((3, 2), want2, dtype=np.int32))
    assert out2.dtype == np.int32


@pytest.mark.parametrize("contiguous", [True, False])
def test_strides_with_and_without_ensure_row_contiguous(rng, contiguous):
    base = rng.normal(size=(6, 16)).astype(np.float32)
    a = base[::2].T  # a genuinely strided (3-row step, transposed) view
    assert not a.flags.c_contiguous
    source = "uint elem = thread_position_in_grid.x; "
    source += "T tmp = inp[elem];" if contiguous else (
        "uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim); T tmp = inp[loc];")
    source += " out[elem] = metal::exp(tmp) * threads_per_simdgroup;"
    k = kiln.metal_kernel(f"myexp{contiguous}", ["inp"], ["out"], source, ensure_row_contiguous=contiguous)
    (out,) = k(inputs=[a], template=[("T", np.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
               output_shapes=[a.shape], output_dtypes=[a.dtype])
    assert_close(out, np.exp(a.astype(np.float64)) * 32, np.float32)


def test_helper_in_header(rng):
    a = rng.normal(size=(2, 2)).astype(np.float32)
    header = """
    template <typename T>
    T do_exp(T x) { return metal::precise::exp(x); }
    """
    k = kiln.metal_kernel("helper", ["a"], ["out1"], "uint elem = thread_position_in_grid.x; out1[elem] = do_exp(a[elem]);",
                          header=header)
    (out,) = k(inputs=[a], grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)], output_dtypes=[np.float32])
    assert_close(out, np.exp(a.astype(np.float64)), np.float32)


def test_attributes_threadgroup_size_into_uint32_output(rng):
    a = rng.normal(size=(1, 1)).astype(np.float32)
    k = kiln.metal_kernel("test_fun", ["a"], ["out"], "out[0] = threads_per_threadgroup.x;")
    (out,) = k(inputs=[a], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(1, 1)], output_dtypes=[np.uint32])
    assert out.dtype == np.uint32 and out.item() == 2


def test_same_name_different_source_never_reuses_stale_code(rng):
    a = rng.normal(size=(32,)).astype(np.float32)
    for value in (0.0, 1.0):
        k = kiln.metal_kernel("my_kernel", ["inp"], ["out"], f"uint i = thread_position_in_grid.x; out[i] = {value}f;")
        (out,) = k(inputs=[a], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[a.shape],
                   output_dtypes=[a.dtype])
        np.testing.assert_array_equal(out, np.full(32, value, np.float32))
    a = np.arange(32, dtype=np.float32) + rng.normal(size=32).astype(np.float32)
    double = kiln.metal_kernel("dup_name", ["inp"], ["out"], "uint i = thread_position_in_grid.x; out[i] = inp[i] * 2;")
    add = kiln.metal_kernel("dup_name", ["inp"], ["out"], "uint i = thread_position_in_grid.x; out[i] = inp[i] + 100;")
    kw = dict(grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype])
    (x,) = double(inputs=[a], **kw)
    (y,) = add(inputs=[a], **kw)
    np.testing.assert_array_equal(x, a * 2)
    np.testing.assert_array_equal(y, a + 100)


def test_math_mode_reaches_the_compiler_and_bad_options_are_errors(rng):
    with pytest.raises(ValueError):
        kiln.metal_kernel("math_mode", ["a"], ["out"], "", compile_options={"math_mode": "precise"})
    with pytest.raises(ValueError):
        kiln.metal_kernel("math_mode", ["a"], ["out"], "", compile_options={"unknown": "value"})
    a = rng.normal(size=(4,)).astype(np.float32)
    source = """
        uint i = thread_position_in_grid.x;
    #if defined(__FAST_MATH__) && __FAST_MATH__
        out[i] = 1.0f;
    #else
        out[i] = 0.0f;
    #endif
    """
    for mode, want in (("safe", 0.0), ("fast", 1.0)):
        k = kiln.metal_kernel("math_mode", ["a"], ["out"], source, compile_options={"math_mode": mode})
        (out,) = k(inputs=[a], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)], output_dtypes=[np.float32])
        np.testing.assert_array_equal(out, np.full(4, want, np.float32))


def test_mixed_dtypes_specialise_one_kernel(rng):
    k = kiln.metal_kernel("mixed_dtypes", ["inp"], ["out"],
                          "uint elem = thread_position_in_grid.x; out[elem] = inp[elem] + inp[elem];")
    x16 = rng.normal(size=32).astype(np.float16)
    x32 = rng.normal(size=32).astype(np.float32)
    kw = dict(grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32,)])
    (a,) = k(inputs=[x16], output_dtypes=[np.float16], **kw)
    (b,) = k(inputs=[x32], output_dtypes=[np.float32], **kw)
    assert a.dtype == np.float16 and b.dtype == np.float32
    np.testing.assert_array_equal(a, x16 + x16)
    np.testing.assert_array_equal(b, x32 + x32)


def test_a_compile_error_leaves_kiln_usable(rng):
    bad = kiln.metal_kernel("bad", ["a"], ["out"], "this is not metal;")
    a = rng.normal(size=8).astype(np.float32)
    with pytest.raises(kiln.CompileError, match="bad"):
        bad(inputs=[a], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[np.float32])
    good = kiln.metal_kernel("good", ["a"], ["out"], "uint i = thread_position_in_grid.x; out[i] = a[i] * 2;")
    (out,) = good(inputs=[a], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)], output_dtypes=[np.float32])
    np.testing.assert_array_equal(out, a * 2)


def test_init_value_fills_outputs_before_the_kernel(rng):
    a = rng.normal(size=16).astype(np.float32)
    # Only even elements are written; odd ones keep init_value cast to the dtype.
    k = kiln.metal_kernel("evens", ["a"], ["out", "count"],
                          "uint i = thread_position_in_grid.x; out[2 * i] = a[2 * i];")
    out, count = k(inputs=[a], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(16,), (3,)],
                   output_dtypes=[np.float32, np.int32], init_value=2.75)
    want = np.full(16, 2.75, np.float32)
    want[::2] = a[::2]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(count, np.full(3, 2, np.int32))


def test_verbose_prints_the_generated_source(rng, capfd):
    a = rng.normal(size=(4, 16)).astype(np.float16)
    k = kiln.metal_kernel("myexp", ["inp"], ["out"],
                          "uint elem = thread_position_in_grid.x; T tmp = inp[elem]; out[elem] = metal::exp(tmp);")
    kw = dict(inputs=[a], template=[("T", np.float32)], output_shapes=[a.shape], output_dtypes=[a.dtype])
    (out,) = k(grid=(64, 1, 1), threadgroup=(256, 1, 1), verbose=True, **kw)
    printed = capfd.readouterr().out
    source = k.generate(**kw)
    assert printed == f"Generated source code for `myexp`:\n```\n{source}\n```\n"
    assert "const device float16_t* inp [[buffer(0)]]" in source
    assert "custom_kernel_myexp_float_float16_t_float16_t" in source or "custom_kernel_myexp" in source
    assert_close(out.astype(np.float64), np.exp(a.astype(np.float64)), np.float16)


def test_count_mismatches_are_value_errors_in_mlx_words(rng):
    a = rng.normal(size=4).astype(np.float32)
    k = kiln.metal_kernel("counts", ["a"], ["out"], "out[0] = a[0];")
    kw = dict(grid=(1, 1, 1), threadgroup=(1, 1, 1))
    with pytest.raises(ValueError, match=r"Expected `inputs` to have size 1 but got size 2"):
        k(inputs=[a, a], output_shapes=[(1,)], output_dtypes=[np.float32], **kw)
    with pytest.raises(ValueError, match=r"Expected `output_shapes` to have size 1 but got size 2"):
        k(inputs=[a], output_shapes=[(1,), (1,)], output_dtypes=[np.float32], **kw)
    with pytest.raises(ValueError, match=r"Expected `output_dtypes` to have size 1 but got size 0"):
        k(inputs=[a], output_shapes=[(1,)], output_dtypes=[], **kw)
    with pytest.raises(ValueError, match="invalid template argument"):
        k(inputs=[a], output_shapes=[(1,)], output_dtypes=[np.float32], template=[("T", 1.5)], **kw)
    with pytest.raises(ValueError, match="at least one output"):
        kiln.metal_kernel("none", ["a"], [], "")
