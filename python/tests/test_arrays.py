"""NumPy arrays in, NumPy arrays out, without copies: every dtype, 0-d and scalar inputs,
strided views (negative, zero and non-unit strides), empty arrays, DLPack producers."""

import ml_dtypes
import numpy as np
import pytest

import kiln

from conftest import ALL_DTYPES, random_array

COPY = kiln.metal_kernel("copy", ["inp"], ["out"], "uint i = thread_position_in_grid.x; out[i] = inp[i];")
STRIDED_COPY = kiln.metal_kernel(
    "strided_copy", ["inp"], ["out"],
    # A signed index: elem_to_loc computes in the index's type, and NumPy views may step backwards.
    "uint i = thread_position_in_grid.x; out[i] = inp[elem_to_loc(int64_t(i), inp_shape, inp_strides, inp_ndim)];",
    ensure_row_contiguous=False,
)


def copy(kernel, a, dtype=None):
    dtype = a.dtype if dtype is None else dtype
    (out,) = kernel(inputs=[a], output_shapes=[a.shape], output_dtypes=[dtype], grid=(max(a.size, 1), 1, 1),
                    threadgroup=(64, 1, 1))
    return out


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_round_trips_exactly(rng, dtype):
    a = random_array(rng, (5, 37), dtype)
    out = copy(COPY, a)
    assert out.dtype == dtype and out.shape == a.shape
    np.testing.assert_array_equal(out.view(np.uint8), a.view(np.uint8))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_dtype_names_of_every_framework_spelling_agree(dtype):
    (out,) = COPY(inputs=[np.zeros(3, dtype)], output_shapes=[(3,)], output_dtypes=[dtype.name],
                  grid=(3, 1, 1), threadgroup=(3, 1, 1))
    assert out.dtype == dtype


def test_bfloat16_outputs_are_ml_dtypes_arrays(rng):
    a = random_array(rng, (64,), ml_dtypes.bfloat16)
    out = copy(COPY, a, "bfloat16")
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), a.view(np.uint16))


def test_outputs_wrap_kilns_buffer_without_a_copy(rng):
    a = random_array(rng, (8, 8), np.float32)
    out = copy(COPY, a)
    assert type(out.base).__name__ == "HostArray", "the output is a view of kiln's buffer"
    assert out.flags.writeable and out.flags.c_contiguous
    out[0, 0] = 123.0  # writable like any NumPy array
    assert out[0, 0] == 123.0


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x[::2],
        lambda x: x[:, ::-3],
        lambda x: x.T,
        lambda x: x[1:, 2:7][::-1],
        lambda x: np.broadcast_to(x[:1], x.shape),
    ],
    ids=["step", "negative", "transpose", "offset-negative", "broadcast"],
)
@pytest.mark.parametrize("kernel", [COPY, STRIDED_COPY], ids=["row-contiguous", "strided"])
def test_strided_views_are_read_as_numpy_lays_them_out(rng, view, kernel):
    base = random_array(rng, (12, 20), np.float32)
    a = view(base)
    out = copy(kernel, a)
    np.testing.assert_array_equal(out, np.ascontiguousarray(a))


def test_strides_reach_the_kernel_in_elements_unchanged(rng):
    base = random_array(rng, (6, 10), np.int32)
    a = base[::-2, 1::3]
    k = kiln.metal_kernel("strides_of", ["inp"], ["out"],
                          "out[0] = inp_strides[0]; out[1] = inp_strides[1]; out[2] = inp_shape[0];",
                          ensure_row_contiguous=False)
    (out,) = k(inputs=[a], output_shapes=[(3,)], output_dtypes=[np.int64], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    np.testing.assert_array_equal(out, [-20, 3, 3])


def test_zero_d_inputs_and_scalars_follow_mlx_rules(rng):
    k = kiln.metal_kernel("scalars", ["a", "b", "c", "d"], ["out"],
                          "out[0] = a; out[1] = b; out[2] = c ? 1.0f : 0.0f; out[3] = d;")
    x = np.float16(rng.normal())
    y = np.array(rng.normal(), dtype=np.float32)
    v = float(rng.normal())
    (out,) = k(inputs=[x, y, True, v], output_shapes=[(4,)], output_dtypes=[np.float32],
               grid=(1, 1, 1), threadgroup=(1, 1, 1))
    np.testing.assert_array_equal(out, np.array([np.float32(x), y, 1.0, np.float32(v)], np.float32))
    src = k.generate(inputs=[x, y, True, v], output_shapes=[(4,)], output_dtypes=[np.float32])
    assert "const constant float16_t& a" in src, "a NumPy scalar keeps its dtype"
    assert "const constant bool& c" in src and "const constant float& d" in src


def test_numpy_scalars_keep_their_dtype_even_when_they_subclass_python_numbers():
    k = kiln.metal_kernel("np_scalar", ["a"], ["out"], "out[0] = a;")
    src = k.generate(inputs=[np.int16(-3)], output_shapes=[(1,)], output_dtypes=[np.float32])
    assert "const constant int16_t& a" in src
    with pytest.raises(kiln.UnsupportedDTypeError, match="float64"):
        k(inputs=[np.float64(1.5)], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
          threadgroup=(1, 1, 1))


def test_large_python_ints_become_int64():
    k = kiln.metal_kernel("bigint", ["n"], ["out"], "out[0] = n;")
    src = k.generate(inputs=[2**40], output_shapes=[(1,)], output_dtypes=[np.int64])
    assert "const constant int64_t& n" in src
    (out,) = k(inputs=[2**40 + 7], output_shapes=[(1,)], output_dtypes=[np.int64], grid=(1, 1, 1),
               threadgroup=(1, 1, 1))
    assert out[0] == 2**40 + 7


def test_empty_inputs_and_outputs(rng):
    a = np.zeros((0, 4), np.float32)
    k = kiln.metal_kernel("empty", ["inp"], ["out"], "out[0] = 5.0f;")
    (out,) = k(inputs=[a], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    assert out[0] == 5.0


def test_dlpack_producers_are_accepted_without_a_copy(rng):
    a = random_array(rng, (32,), np.float32)

    class Producer:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    (out,) = COPY(
        inputs=[Producer(a)], output_shapes=[a.shape], output_dtypes=[a.dtype], grid=(32, 1, 1),
        threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(out, a)


def test_inputs_are_read_in_place(rng):
    # A library kernel writes its buffer in place: the caller's NumPy array changes.
    lib = kiln.metal_library("inplace", """
        #include <metal_stdlib>
        using namespace metal;
        kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] *= 2.0f; }
    """)
    a = random_array(rng, (40,), np.float32)
    before = a.copy()
    assert lib.dispatch("twice", [a], threads=(40, 1, 1), threadgroup=(32, 1, 1)) == []
    np.testing.assert_array_equal(a, before * 2)


def _read_only(a):
    a.setflags(write=False)
    return a


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a.astype(a.dtype.newbyteorder()),  # the other byte order: read through a native copy
        lambda a: np.frombuffer(b"\0" + a.tobytes(), np.float32, a.size, offset=1),  # misaligned
        lambda a: a[:, None],  # a length-1 axis of stride 0, C-contiguous
        lambda a: a.view(type("Sub", (np.ndarray,), {})),  # a subclass
        _read_only,
    ],
    ids=["byte-swapped", "misaligned", "newaxis", "subclass", "read-only"],
)
def test_numpy_layouts_and_flags_read_as_their_values(rng, make):
    a = random_array(rng, (37,), np.float32)
    b = make(a.copy())
    want = np.ascontiguousarray(b, np.float32)
    np.testing.assert_array_equal(want.reshape(-1), a)
    np.testing.assert_array_equal(copy(COPY, b, np.float32), want)
    np.testing.assert_array_equal(copy(STRIDED_COPY, b, np.float32), want)


def test_length_one_axes_of_contiguous_arrays_reach_the_kernel_with_row_major_strides(rng):
    # NumPy gives a new axis stride 0; a C-contiguous array is described as row-major, as MLX does.
    a = random_array(rng, (4,), np.int32)[:, None]
    assert a.strides[1] == 0 and a.flags.c_contiguous
    k = kiln.metal_kernel("strides_of_column", ["inp"], ["out"],
                          "out[0] = inp_strides[0]; out[1] = inp_strides[1];", ensure_row_contiguous=False)
    (out,) = k(inputs=[a], output_shapes=[(2,)], output_dtypes=[np.int64], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    np.testing.assert_array_equal(out, [1, 1])


@pytest.mark.parametrize("dtype", [np.intc, np.uintc, np.int_, np.uint, np.longlong, np.ulonglong, np.short,
                                   np.ubyte, np.bool_, np.half])
def test_every_c_spelling_of_an_integer_type_reads_and_comes_back_as_numpy_names_it(rng, dtype):
    a = (rng.integers(0, 100, 17) % (2 if dtype is np.bool_ else 100)).astype(dtype)
    out = copy(COPY, a)
    assert out.dtype == np.dtype(dtype) and out.dtype.name == np.dtype(dtype).name
    np.testing.assert_array_equal(out, a)


def test_an_output_outlives_everything_but_itself(rng):
    a = random_array(rng, (3, 5), np.float32)
    k = kiln.metal_kernel("short_lived", ["inp"], ["out"], "uint i = thread_position_in_grid.x; out[i] = inp[i] * 2;")
    (out,) = k(inputs=[a], output_shapes=[(3, 5)], output_dtypes=[np.dtype("float32")], grid=(15, 1, 1),
               threadgroup=(16, 1, 1))
    del k
    view = out[1:]
    del out
    import gc
    gc.collect()
    np.testing.assert_array_equal(view, a[1:] * 2)
    (zero_d,) = COPY(inputs=[a], output_shapes=[()], output_dtypes=[np.float32], grid=(1, 1, 1),
                     threadgroup=(1, 1, 1))
    assert zero_d.shape == () and zero_d == a[0, 0]
