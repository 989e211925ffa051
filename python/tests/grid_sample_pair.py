"""The MLX docs' grid_sample and its VJP (kernels in test_cookbook.py) as launch functions that
take NumPy arrays or PyTorch tensors alike, and the same pair as a kiln.custom_function: the
worked example of the gradient tests."""

import math

import numpy as np

import kiln
from test_cookbook import GRID_SAMPLE, GRID_SAMPLE_VJP


def grid_sample(x, grid):
    """x (B, H, W, C) NHWC, grid (B, gH, gW, 2) in [-1, 1]: bilinear, zeros padding,
    align_corners=False; returns (B, gH, gW, C) in x's dtype."""
    B, _, _, C = x.shape
    _, gh, gw, _ = grid.shape
    out_shape = (B, gh, gw, C)
    return GRID_SAMPLE(inputs=[x, grid], template=[("T", x.dtype)], grid=(math.prod(out_shape), 1, 1),
                       threadgroup=(256, 1, 1), output_shapes=[out_shape], output_dtypes=[x.dtype])[0]


def grid_sample_vjp(primals, cotangent, output):
    """MLX's VJP shape: the cotangents of (x, grid), accumulated atomically in float32."""
    x, grid = primals
    return tuple(GRID_SAMPLE_VJP(
        inputs=[x, grid, cotangent], template=[("T", x.dtype)], grid=(math.prod(cotangent.shape), 1, 1),
        threadgroup=(256, 1, 1), output_shapes=[x.shape, grid.shape], output_dtypes=[np.float32, np.float32],
        init_value=0))


grid_sample_fn = kiln.custom_function(grid_sample)
grid_sample_fn.vjp(grid_sample_vjp)


def interior_grid(rng, batch, gh, gw, height, width, margin=0.2):
    """Grid points (float32) whose source positions lie at least ``margin`` pixels inside a
    bilinear cell (border cells included, where some corners are padding), so that finite
    differences of step below the margin never cross a kink."""
    def coords(size):
        cell = rng.integers(-1, size, size=(batch, gh, gw))
        pos = cell + rng.uniform(margin, 1 - margin, size=cell.shape)
        return (2 * pos + 1) / size - 1
    return np.stack([coords(width), coords(height)], axis=-1).astype(np.float32)
