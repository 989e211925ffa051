"""The MLX drop-in on MLX's CUDA build (``mlx-cuda-13``): MLX GPU arrays are read and written in
place on their GPU by kiln's CUDA backend. Skipped unless MLX itself has CUDA (run in a venv
with ``mlx`` + ``mlx-cuda-13`` on a GPU machine; the other test_mlx_* files run there too, on
MLX's default GPU device)."""

import ml_dtypes
import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import kiln  # noqa: E402
import kiln.mlx  # noqa: E402
from kiln.mlx._dlpack import describe_dlpack  # noqa: E402

from conftest import assert_close  # noqa: E402

pytestmark = pytest.mark.skipif(not (hasattr(mx, "cuda") and mx.cuda.is_available()),
                                reason="MLX has no CUDA back-end here (needs mlx-cuda-13 and a GPU)")


@pytest.fixture(autouse=True, scope="module")
def dropin():
    assert kiln.mlx.install(force=True)
    yield
    kiln.mlx.uninstall()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_kernel_on_mlx_gpu_arrays_runs_on_their_gpu_in_place(dtype):
    assert kiln.cuda_available(), kiln.cuda_status()
    t = getattr(mx, dtype)
    x = (mx.random.normal((7, 300)) * 2).astype(t)[:, ::2]  # strided: bound with its strides
    kernel = mx.fast.metal_kernel(name="scaled_exp_strided", input_names=["x", "s"], output_names=["out"],
                                  ensure_row_contiguous=False, source="""
        uint i = thread_position_in_grid.x;
        auto v = static_cast<float>(x[elem_to_loc(i, x_shape, x_strides, x_ndim)]);
        out[i] = static_cast<T>(metal::exp(v) * s);
    """)
    (out,) = kernel(inputs=[x, 0.5], template=[("T", t)], grid=(x.size, 1, 1), threadgroup=(128, 1, 1),
                    output_shapes=[x.shape], output_dtypes=[t])
    # MLX's CUDA arrays are CUDA managed memory (exported as host memory): kiln binds them on
    # their GPU, not on the emulator.
    assert describe_dlpack(x)[7] >= 0 and describe_dlpack(out)[7] >= 0
    ref = np.exp(np.asarray(x.astype(mx.float32)).astype(np.float64)) * 0.5
    got = np.asarray(out.astype(mx.float32))
    tol = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    assert_close(got, ref, tol)
    # The outputs are ordinary MLX arrays: MLX's own ops use them on the GPU afterwards.
    assert_close(np.asarray((out * 2).astype(mx.float32)), 2 * ref, tol)


def test_atomic_outputs_with_init_value_on_the_gpu():
    a = mx.random.normal((4096,))
    idx = mx.random.randint(0, 17, (4096,))
    kernel = mx.fast.metal_kernel(name="bucket_sums", input_names=["a", "idx"], output_names=["sums"],
                                  atomic_outputs=True, source="""
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&sums[idx[i]], a[i], memory_order_relaxed);
    """)
    (sums,) = kernel(inputs=[a, idx], grid=(4096, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(17,)],
                     output_dtypes=[mx.float32], init_value=1.0)
    want = np.ones(17)
    np.add.at(want, np.asarray(idx), np.asarray(a).astype(np.float64))
    assert_close(np.asarray(sums), want, np.float32)
