"""kiln.custom_function with MLX's .vjp / .jvp shapes, and kiln.vjp, jvp, grad and
value_and_grad on NumPy arrays (the CPU emulator): a kernel's backward checked against NumPy
and finite differences."""

import numpy as np
import pytest

import kiln
from conftest import assert_close
from grid_sample_pair import grid_sample, grid_sample_fn, interior_grid

SCALE_EXP = kiln.metal_kernel("cf_scale_exp", ["x", "s"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(x[i]) * s;
""")
SCALE_EXP_VJP = kiln.metal_kernel("cf_scale_exp_vjp", ["x", "s", "cot"], ["x_grad"], """
    uint i = thread_position_in_grid.x;
    x_grad[i] = metal::exp(x[i]) * s * cot[i];
""")
SUM_SQUARES = kiln.metal_kernel("cf_sum_squares", ["x"], ["out"], """
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&out[0], x[i] * x[i], memory_order_relaxed);
""", atomic_outputs=True)


def launch(kernel, inputs, like, dtype=None):
    return kernel(inputs=inputs, grid=(like.size, 1, 1), threadgroup=(64, 1, 1), output_shapes=[like.shape],
                  output_dtypes=[dtype or like.dtype])[0]


@kiln.custom_function
def scale_exp(x, s):
    return launch(SCALE_EXP, [x, s], x)


seen = {}


@scale_exp.vjp
def scale_exp_vjp(primals, cotangent, output):
    seen["vjp"] = (primals, cotangent, output)
    x, s = primals
    return launch(SCALE_EXP_VJP, [x, s, cotangent], x), None


@scale_exp.jvp
def scale_exp_jvp(primals, tangents):
    x, s = primals
    dx, _ = tangents
    return launch(SCALE_EXP_VJP, [x, s, dx], x)


@kiln.custom_function
def sum_squares(x):
    return SUM_SQUARES(inputs=[x], grid=(x.size, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(1,)],
                       output_dtypes=[np.float32], init_value=0)[0]


@sum_squares.vjp
def sum_squares_vjp(x, cotangent, output):
    seen["single"] = (x, cotangent, output)
    return 2 * x * cotangent


def f64(a):
    return np.asarray(a, dtype=np.float64)


def test_decorators_return_the_function_as_mlx_does():
    assert isinstance(scale_exp, kiln.custom_function) and scale_exp.vjp_fun is not None
    assert scale_exp_vjp is scale_exp and scale_exp_jvp is scale_exp
    x = np.random.default_rng(0).normal(size=9).astype(np.float32)
    assert_close(scale_exp(x, 1.5), 1.5 * np.exp(f64(x)), "float32")  # calling runs the forward


def test_elementwise_vjp_matches_numpy_and_finite_differences(rng):
    x = rng.normal(size=(3, 50)).astype(np.float32)
    cot = rng.normal(size=x.shape).astype(np.float32)
    outs, (gx, gs) = kiln.vjp(scale_exp, [x, 0.75], [cot])
    assert gs is None and outs[0].shape == x.shape
    assert_close(outs[0], 0.75 * np.exp(f64(x)), "float32")
    assert_close(gx, 0.75 * np.exp(f64(x)) * cot, "float32")
    # The forward is elementwise, so one central difference per element gives the Jacobian's diagonal.
    h = 1e-3
    fd = (f64(scale_exp(x + h, 0.75)) - f64(scale_exp(x - h, 0.75))) / (2 * h) * cot
    assert np.abs(gx - fd).max() <= 1e-3 * np.abs(fd).max()
    primals, cotangent, output = seen["vjp"]
    assert isinstance(primals, tuple) and primals[1] == 0.75 and cotangent is cot and output is outs[0]


def test_jvp_uses_the_rule(rng):
    x = rng.normal(size=40).astype(np.float32)
    t = rng.normal(size=40).astype(np.float32)
    outs, (jx,) = kiln.jvp(scale_exp, [x, 2.0], [t, 0.0])
    assert_close(outs[0], 2 * np.exp(f64(x)), "float32")
    assert_close(jx, 2 * np.exp(f64(x)) * t, "float32")


def test_grad_and_value_and_grad_of_a_scalar_kernel(rng):
    x = rng.normal(size=100).astype(np.float32)
    value, g = kiln.value_and_grad(sum_squares)(x)
    assert_close(value, [np.sum(f64(x) ** 2)], "float32")
    assert_close(g, 2 * f64(x), "float32")
    assert_close(kiln.grad(sum_squares)(x), 2 * f64(x), "float32")
    single, cotangent, output = seen["single"]
    assert single is x, "a lone primal is passed itself, not in a tuple"
    assert cotangent.shape == (1,) and output.shape == (1,)


def test_grid_sample_vjp_matches_finite_differences(rng):
    x = rng.normal(size=(2, 6, 7, 3)).astype(np.float32)
    grid = interior_grid(rng, 2, 4, 5, 6, 7)
    cot = rng.normal(size=(2, 4, 5, 3)).astype(np.float32)
    outs, (gx, gg) = kiln.vjp(grid_sample_fn, [x, grid], [cot])
    assert gx.dtype == np.float32 and gg.shape == grid.shape
    # Directional derivatives of <cot, f> along random directions of x and of grid (steps of at
    # most 0.035 pixels, inside the 0.2-pixel margins where f is bilinear).
    h = 1e-2
    for which in (0, 1):
        v = rng.normal(size=(x, grid)[which].shape).astype(np.float32)
        step = [np.zeros_like(x), np.zeros_like(grid)]
        step[which] = h * v

        def pairing(sign):
            return float(np.sum(f64(grid_sample(x + sign * step[0], grid + sign * step[1])) * cot))

        fd = (pairing(1) - pairing(-1)) / (2 * h)
        exact = float(np.sum(f64((gx, gg)[which]) * v))
        assert abs(fd - exact) <= 1e-3 * max(1.0, abs(exact)), (which, fd, exact)


def test_errors_are_typed(rng):
    x = rng.normal(size=8).astype(np.float32)
    with pytest.raises(kiln.InvalidArgumentError, match="custom_function with a .vjp"):
        kiln.vjp(lambda a: scale_exp(a, 1.0), [x], [x])
    with pytest.raises(kiln.InvalidArgumentError, match="2 cotangents for 1 outputs"):
        kiln.vjp(scale_exp, [x, 1.0], [x, x])
    with pytest.raises(kiln.InvalidArgumentError, match="scalar"):
        kiln.grad(scale_exp)(x, 1.0)
    with pytest.raises(kiln.InvalidArgumentError, match="jvp"):
        kiln.jvp(sum_squares, [x], [x])
    with pytest.raises(kiln.InvalidArgumentError, match="callable"):
        kiln.custom_function(3)
