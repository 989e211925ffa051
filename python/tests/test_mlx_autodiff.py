"""The MLX docs' grid_sample kernel and its VJP kernel (atomic outputs, ``init_value=0``) as an
``@mx.custom_function`` with ``@f.vjp``, differentiated by MLX's own ``mx.grad`` / ``mx.vjp``
with kiln's drop-in installed: gradients match a pure-MLX grid_sample differentiated by MLX and
float64 finite differences."""

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import kiln.mlx  # noqa: E402

from conftest import assert_close  # noqa: E402

# The MLX docs' grid_sample and its VJP, as the cookbook test runs them through kiln itself.
from test_cookbook import GRID_SAMPLE_HEADER as HEADER  # noqa: E402
from test_cookbook import GRID_SAMPLE_SOURCE as FORWARD  # noqa: E402
from test_cookbook import GRID_SAMPLE_VJP_SOURCE as BACKWARD  # noqa: E402


@pytest.fixture(scope="module")
def grid_sample():
    """The kernels built through ``mx.fast.metal_kernel`` (as user code does, after install)."""
    assert kiln.mlx.install(force=True)
    forward = mx.fast.metal_kernel(name="grid_sample", input_names=["x", "grid"], output_names=["out"],
                                   source=FORWARD, header=HEADER)
    backward = mx.fast.metal_kernel(name="grid_sample_vjp", input_names=["x", "grid", "cotangent"],
                                    output_names=["x_grad", "grid_grad"], source=BACKWARD, header=HEADER,
                                    atomic_outputs=True)

    @mx.custom_function
    def grid_sample(x, grid):
        B, _, _, C = x.shape
        _, gN, gM, _ = grid.shape
        return forward(inputs=[x, grid], template=[("T", x.dtype)], output_shapes=[(B, gN, gM, C)],
                       output_dtypes=[x.dtype], grid=(B * gN * gM * C, 1, 1), threadgroup=(256, 1, 1))[0]

    @grid_sample.vjp
    def grid_sample_vjp(primals, cotangent, _):
        x, grid = primals
        B, _, _, C = x.shape
        _, gN, gM, _ = grid.shape
        x_grad, grid_grad = backward(
            inputs=[x, grid, cotangent], template=[("T", x.dtype)], output_shapes=[x.shape, grid.shape],
            output_dtypes=[x.dtype, x.dtype], grid=(B * gN * gM * C, 1, 1), threadgroup=(256, 1, 1),
            init_value=0)
        return x_grad, grid_grad

    yield grid_sample
    kiln.mlx.uninstall()


def grid_sample_mlx(x, grid):
    """The same bilinear sampling in plain MLX ops (zeros padding, align_corners=False)."""
    B, H, W, C = x.shape
    g = grid.reshape(B, -1, 2)
    px = ((g[..., 0] + 1) * W - 1) / 2
    py = ((g[..., 1] + 1) * H - 1) / 2
    x0, y0 = mx.stop_gradient(mx.floor(px)), mx.stop_gradient(mx.floor(py))
    fx, fy = px - x0, py - y0
    flat = x.reshape(B, H * W, C)
    out = 0
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = (x0 + dx).astype(mx.int32), (y0 + dy).astype(mx.int32)
            ok = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
            w = (fx if dx else 1 - fx) * (fy if dy else 1 - fy) * ok
            idx = mx.clip(yi, 0, H - 1) * W + mx.clip(xi, 0, W - 1)
            out = out + w[..., None] * mx.take_along_axis(flat, idx[..., None], axis=1)
    return out.reshape(B, *grid.shape[1:3], C)


def grid_sample_f64(x, grid):
    """float64 NumPy forward, for finite differences."""
    B, H, W, C = x.shape
    g = grid.reshape(B, -1, 2)
    px, py = ((g[..., 0] + 1) * W - 1) / 2, ((g[..., 1] + 1) * H - 1) / 2
    x0, y0 = np.floor(px).astype(int), np.floor(py).astype(int)
    fx, fy = px - x0, py - y0
    out = np.zeros((B, g.shape[1], C))
    bidx = np.arange(B)[:, None]
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            ok = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
            w = (fx if dx else 1 - fx) * (fy if dy else 1 - fy) * ok
            out += w[..., None] * x[bidx, yi.clip(0, H - 1), xi.clip(0, W - 1)]
    return out.reshape(B, *grid.shape[1:3], C)


def inputs(seed):
    mx.random.seed(seed)
    x = mx.random.normal(shape=(2, 6, 7, 3))
    grid = mx.random.uniform(-1.1, 1.1, shape=(2, 4, 5, 2))
    weights = mx.random.normal(shape=(2, 4, 5, 3))
    return x, grid, weights


def test_forward_matches_mlx_ops(grid_sample):
    x, grid, _ = inputs(1)
    assert_close(np.asarray(grid_sample(x, grid)), np.asarray(grid_sample_mlx(x, grid)).astype(np.float64),
                 np.float32)


def test_mx_grad_matches_mlx_autodiff_of_plain_ops(grid_sample):
    x, grid, weights = inputs(2)

    def loss(f):
        return lambda x, grid: (f(x, grid) * weights).sum()

    gx, gg = mx.grad(loss(grid_sample), argnums=(0, 1))(x, grid)
    rx, rg = mx.grad(loss(grid_sample_mlx), argnums=(0, 1))(x, grid)
    assert gx.shape == x.shape and gg.shape == grid.shape
    assert_close(np.asarray(gx), np.asarray(rx).astype(np.float64), np.float32)
    assert_close(np.asarray(gg), np.asarray(rg).astype(np.float64), np.float32)


def test_mx_vjp_matches_finite_differences(grid_sample):
    x, grid, cot = inputs(3)
    (out,), (vx, vg) = mx.vjp(grid_sample, [x, grid], [cot])
    xv, gv, cv = (np.asarray(a).astype(np.float64) for a in (x, grid, cot))
    assert_close(np.asarray(out), grid_sample_f64(xv, gv), np.float32)

    def fd(wrt_grid):
        base = gv if wrt_grid else xv
        grad = np.zeros_like(base)
        eps = 1e-6
        for i in np.ndindex(base.shape):
            hi, lo = base.copy(), base.copy()
            hi[i] += eps
            lo[i] -= eps
            args = ((xv, hi), (xv, lo)) if wrt_grid else ((hi, gv), (lo, gv))
            grad[i] = ((grid_sample_f64(*args[0]) - grid_sample_f64(*args[1])) * cv).sum() / (2 * eps)
        return grad

    assert_close(np.asarray(vx), fd(False), np.float32)
    assert_close(np.asarray(vg), fd(True), np.float32)


def test_value_and_grad_through_a_model_step(grid_sample):
    x, grid, weights = inputs(4)
    offset = mx.random.normal(shape=grid.shape) * 0.05

    def loss(offset):
        return (grid_sample(x, grid + offset) * weights).sum()

    value, g = mx.value_and_grad(loss)(offset)
    rvalue, rg = mx.value_and_grad(lambda o: (grid_sample_mlx(x, grid + o) * weights).sum())(offset)
    assert abs(value.item() - rvalue.item()) <= 1e-5 * abs(rvalue.item())
    assert_close(np.asarray(g), np.asarray(rg).astype(np.float64), np.float32)
