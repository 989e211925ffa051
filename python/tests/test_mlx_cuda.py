"""The MLX drop-in on MLX's CUDA build (``mlx-cuda-13``): each kernel is an ``mx.fast.cuda_kernel``
built from kiln's lowering, lazy, on MLX's stream (and with ``install(lazy=False)`` MLX GPU arrays
are read and written in place on their GPU by kiln's CUDA backend, eagerly). Skipped unless MLX
itself has CUDA (run in a venv with ``mlx`` + ``mlx-cuda-13`` on a GPU machine; the other
test_mlx_* files run there too, on MLX's default GPU device, through the lazy path)."""

import warnings

import ml_dtypes
import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import kiln  # noqa: E402
import kiln.mlx  # noqa: E402
from kiln.mlx._dlpack import describe_dlpack  # noqa: E402

from conftest import assert_close  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not (hasattr(mx, "cuda") and mx.cuda.is_available()),
                                 reason="MLX has no CUDA back-end here (needs mlx-cuda-13 and a GPU)")]


@pytest.fixture(autouse=True, params=[True, False], ids=["lazy", "eager"])
def dropin(request):
    kiln.mlx.uninstall()
    assert kiln.mlx.install(force=True, lazy=request.param)
    yield request.param
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
    mx.eval(out)
    assert describe_dlpack(x).ordinal >= 0 and describe_dlpack(out).ordinal >= 0
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


# One SIMD-group sum per 32 threads, then each group's sum across a barrier, in a 2-D grid whose
# edge groups are partial; every thread also reports its Metal attributes.
WHERE_AM_I = """
    threadgroup float partial[32];
    uint2 p = thread_position_in_grid.xy;
    uint i = p.x + threads_per_grid.x * p.y;
    float s = simd_sum(x[i]);
    if (thread_index_in_simdgroup == 0) partial[simdgroup_index_in_threadgroup] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint k = 0; k < simdgroups_per_threadgroup; ++k) total += partial[k];
    out[i * 5 + 0] = float(thread_index_in_threadgroup);
    out[i * 5 + 1] = float(threads_per_threadgroup.x + 100 * threads_per_threadgroup.y);
    out[i * 5 + 2] = float(thread_index_in_simdgroup + 100 * simdgroup_index_in_threadgroup);
    out[i * 5 + 3] = s;
    out[i * 5 + 4] = total;
"""


def where_am_i_reference(x, grid, tg):
    """What Metal gives each thread of WHERE_AM_I (exactly grid threads; partial edge groups)."""
    gx, gy = grid
    out = np.zeros((gx * gy, 5))
    for py in range(gy):
        for px in range(gx):
            bx, by = px // tg[0], py // tg[1]
            nx, ny = min(tg[0], gx - bx * tg[0]), min(tg[1], gy - by * tg[1])
            lin = (px - bx * tg[0]) + nx * (py - by * tg[1])
            members = [(qx, qy) for qy in range(by * tg[1], by * tg[1] + ny) for qx in range(bx * tg[0], bx * tg[0] + nx)]
            same_simd = [x[qx + gx * qy] for k, (qx, qy) in enumerate(members) if k // 32 == lin // 32]
            i = px + gx * py
            out[i] = [lin, nx + 100 * ny, lin % 32 + 100 * (lin // 32), sum(same_simd),
                      sum(x[qx + gx * qy] for qx, qy in members)]
    return out.ravel()


@pytest.mark.parametrize("grid,tg", [((12, 10), (8, 8)), ((64, 4), (32, 4)), ((70, 3), (64, 2)), ((40, 3), (32, 2)),
                                     ((5, 7), (4, 4))])
def test_partial_threadgroups_give_metals_attributes_and_barriers(grid, tg):
    x = mx.random.normal((grid[0] * grid[1],))
    kernel = mx.fast.metal_kernel(name="where_am_i", input_names=["x"], output_names=["out"], source=WHERE_AM_I)
    (out,) = kernel(inputs=[x], grid=(*grid, 1), threadgroup=(*tg, 1), output_shapes=[(grid[0] * grid[1] * 5,)],
                    output_dtypes=[mx.float32])
    assert_close(np.asarray(out), where_am_i_reference(np.asarray(x).astype(np.float64), grid, tg), np.float32)


def test_a_call_is_a_lazy_mlx_primitive(dropin, monkeypatch):
    if not dropin:
        pytest.skip("the eager path evaluates")
    kernel = mx.fast.metal_kernel(name="twice", input_names=["x"], output_names=["out"],
                                  source="uint i = thread_position_in_grid.x; out[i] = x[i] * 2;")
    x = mx.random.normal((1000,))
    real_eval = mx.eval

    def refuse(*args, **kwargs):
        raise AssertionError("the call evaluated something")

    monkeypatch.setattr(mx, "eval", refuse)
    (out,) = kernel(inputs=[x + 1], grid=(1000, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(1000,)],
                    output_dtypes=[mx.float32])
    monkeypatch.setattr(mx, "eval", real_eval)
    assert any(not isinstance(p, str) for p in kernel._plans.values()), "the call went through cuda_kernel"
    assert_close(np.asarray(out), (np.asarray(x).astype(np.float64) + 1) * 2, np.float32)


def test_a_kernel_inside_mx_compile(dropin):
    if not dropin:
        pytest.skip("the eager path cannot run inside mx.compile")
    kernel = mx.fast.metal_kernel(name="silu", input_names=["x"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        float v = x[i];
        out[i] = v / (1.0f + metal::exp(-v));
    """)

    def f(x):
        (y,) = kernel(inputs=[x], grid=(x.size, 1, 1), threadgroup=(256, 1, 1), output_shapes=[x.shape],
                      output_dtypes=[x.dtype])
        return y * 2 + x

    x = mx.random.normal((3, 333))
    v = np.asarray(x).astype(np.float64)
    want = 2 * v / (1 + np.exp(-v)) + v
    assert_close(np.asarray(mx.compile(f)(x)), want, np.float32)
    assert_close(np.asarray(f(x)), want, np.float32)


def test_custom_function_vjp_and_grad_through_kernels(dropin):
    if not dropin:
        pytest.skip("test_mlx_autodiff covers the eager path")
    fwd = mx.fast.metal_kernel(name="cube", input_names=["x"], output_names=["y"],
                               source="uint i = thread_position_in_grid.x; y[i] = x[i] * x[i] * x[i];")
    bwd = mx.fast.metal_kernel(name="cube_vjp", input_names=["x", "g"], output_names=["dx"],
                               source="uint i = thread_position_in_grid.x; dx[i] = 3 * x[i] * x[i] * g[i];")

    def launch(k, inputs, x):
        return k(inputs=inputs, grid=(x.size, 1, 1), threadgroup=(128, 1, 1), output_shapes=[x.shape],
                 output_dtypes=[x.dtype])[0]

    @mx.custom_function
    def cube(x):
        return launch(fwd, [x], x)

    @cube.vjp
    def cube_vjp(x, cotangent, output):
        return launch(bwd, [x, cotangent], x)

    x = mx.random.normal((500,))
    loss = lambda v: (cube(v) * mx.arange(500)).sum()  # noqa: E731
    want = 3 * np.asarray(x).astype(np.float64) ** 2 * np.arange(500)
    assert_close(np.asarray(mx.grad(loss)(x)), want, np.float32)
    assert_close(np.asarray(mx.compile(mx.grad(loss))(x)), want, np.float32)


def test_vmap_behaves_as_for_mlxs_own_custom_kernels(dropin):
    if not dropin:
        pytest.skip("the eager path cannot run inside mx.vmap")
    ours = mx.fast.metal_kernel(name="inc", input_names=["x"], output_names=["out"],
                                source="uint i = thread_position_in_grid.x; out[i] = x[i] + 1;")
    theirs = mx.fast.cuda_kernel(name="inc_cuda", input_names=["x"], output_names=["out"],
                                 source="auto i = cooperative_groups::this_grid().thread_rank(); out[i] = x[i] + 1;")

    def run(k):
        def f(x):
            return k(inputs=[x], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)],
                     output_dtypes=[mx.float32])[0]
        try:
            return np.asarray(mx.vmap(f)(mx.ones((3, 8))))
        except Exception as e:  # noqa: BLE001 - compared below
            return type(e)

    got, want = run(ours), run(theirs)
    if isinstance(want, type):
        assert got is want, f"MLX's own kernel raises {want.__name__}; the drop-in gave {got}"
    else:
        np.testing.assert_array_equal(got, want)


def test_a_grid_beyond_one_launch_runs_eagerly_once_warned(dropin):
    if not dropin:
        pytest.skip("the eager path needs no warning")
    kernel = mx.fast.metal_kernel(name="tall", input_names=["x"], output_names=["out"],
                                  source="uint j = thread_position_in_grid.y; out[j] = x[0] + float(j);")
    x = mx.ones((4,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (out,) = kernel(inputs=[x], grid=(1, 70000, 1), threadgroup=(1, 1, 1), output_shapes=[(70000,)],
                        output_dtypes=[mx.float32])
    assert any(issubclass(w.category, kiln.mlx.EagerKernelWarning) for w in caught)
    np.testing.assert_array_equal(np.asarray(out), 1 + np.arange(70000, dtype=np.float32))
