"""kiln.ops under MLX's names and parameters, on NumPy arrays, against NumPy references."""

import numpy as np
import pytest

import kiln

from conftest import FLOAT_DTYPES, assert_close, random_array

dtypes = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)


def f64(a):
    return np.asarray(a).astype(np.float64)


@dtypes
def test_rms_norm(rng, dtype):
    x, w = random_array(rng, (6, 300), dtype), random_array(rng, (300,), dtype, 0.5, 1.5)
    out = kiln.ops.rms_norm(x, w, 1e-5)
    v = f64(x)
    assert out.dtype == dtype
    assert_close(out, v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * f64(w), dtype)


@dtypes
def test_softmax(rng, dtype):
    x = random_array(rng, (5, 333), dtype, -10, 10)
    v = f64(x)
    e = np.exp(v - v.max(-1, keepdims=True))
    assert_close(kiln.ops.softmax(x), e / e.sum(-1, keepdims=True), dtype)


def test_rope_half_split(rng):
    x = random_array(rng, (1, 2, 7, 32), np.float32)
    out = kiln.ops.rope(x, 32, traditional=False, base=10000.0, scale=1.0, offset=3)
    v = f64(x)
    theta = (np.arange(7)[:, None] + 3) * 10000.0 ** (-np.arange(0, 32, 2) / 32)
    x1, x2 = v[..., :16], v[..., 16:]
    want = np.concatenate([x1 * np.cos(theta) - x2 * np.sin(theta), x1 * np.sin(theta) + x2 * np.cos(theta)], -1)
    assert_close(out, want, np.float32)


@pytest.mark.parametrize("mask", [None, "causal"])
def test_scaled_dot_product_attention(rng, mask):
    q = random_array(rng, (1, 4, 9, 64), np.float32)
    k = random_array(rng, (1, 2, 9, 64), np.float32)
    v = random_array(rng, (1, 2, 9, 64), np.float32)
    out = kiln.ops.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    kk, vv = np.repeat(f64(k), 2, axis=1), np.repeat(f64(v), 2, axis=1)
    s = f64(q) @ kk.transpose(0, 1, 3, 2) * 0.125
    if mask == "causal":
        s = np.where(np.tril(np.ones((9, 9), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    assert_close(out, (p / p.sum(-1, keepdims=True)) @ vv, np.float32)


def test_exp_of_a_strided_view_and_silu(rng):
    x = random_array(rng, (8, 10), np.float32)[::-2, 1::3]
    assert_close(kiln.ops.exp(x), np.exp(f64(x)), np.float32)
    v = f64(x)
    assert_close(kiln.ops.silu(x), v / (1 + np.exp(-v)), np.float32)


def test_cholesky_and_an_error_naming_the_op(rng):
    m = random_array(rng, (3, 8, 8), np.float32)
    spd = m @ m.transpose(0, 2, 1) + 8 * np.eye(8, dtype=np.float32)
    assert_close(kiln.ops.cholesky(spd), np.linalg.cholesky(f64(spd)), np.float32)
    with pytest.raises(kiln.InvalidArgumentError, match="rms_norm"):
        kiln.ops.rms_norm(random_array(rng, (4, 8), np.float32), random_array(rng, (5,), np.float32), 1e-5)


def test_kiln_ops_offers_every_op_of_the_registry():
    # The library's registry (kiln::ops::registry) is the one list of ops; kiln.ops names each.
    listed = kiln._kiln.op_registry()
    assert len(listed) >= 16
    python_names = [py for _, py in listed]
    assert sorted(python_names) == sorted(kiln.ops.__all__)
    for name in python_names:
        assert callable(getattr(kiln.ops, name)), name
