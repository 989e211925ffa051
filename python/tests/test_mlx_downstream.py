"""Kernels of a real downstream package (mlx-lm, from the package index) through the drop-in,
called through mlx-lm's own functions, against mlx-lm's own pure-MLX fallbacks on the same
random inputs: the gated-delta recurrence (four kernel variants), the Mamba-2 SSM step, the
RWKV-7 step, and the distillation losses whose VJPs are kernels (``mx.grad``)."""

import importlib

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

import kiln.mlx  # noqa: E402

from conftest import TOLERANCE  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def dropin():
    assert kiln.mlx.install(force=True)
    yield
    kiln.mlx.uninstall()


def module_with_kernels(name, kernel_attr):
    """An mlx-lm module imported (or re-imported) with the drop-in installed: its kernels are
    built at import time only when ``mx.metal.is_available()``."""
    module = importlib.import_module(name)
    if getattr(module, kernel_attr) is None:
        module = importlib.reload(module)
    assert isinstance(getattr(module, kernel_attr), kiln.mlx.MetalKernel)
    return module


def assert_close(got, want, dtype="float32"):
    got = np.asarray(got.astype(mx.float32)).astype(np.float64)
    want = np.asarray(want.astype(mx.float32)).astype(np.float64)
    assert got.shape == want.shape
    assert not np.isnan(got).any(), "NaN in the kernel's output"
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= TOLERANCE[dtype], f"relative L2 error {err:.3g} above {TOLERANCE[dtype]} ({dtype})"


def gdn_inputs(B, T, Hk, Hv, Dk, Dv, dtype, vector_gate=False):
    gd = importlib.import_module("mlx_lm.models.gated_delta")
    q = mx.random.normal((B, T, Hk, Dk)).astype(dtype)
    k = mx.random.normal((B, T, Hk, Dk)).astype(dtype)
    q, k = gd.normalize_qk(q, k, inv_scale=Dk**-0.5, eps=1e-6)
    v = mx.random.normal((B, T, Hv, Dv)).astype(dtype)
    b = mx.random.normal((B, T, Hv)).astype(dtype)
    if vector_gate:
        # compute_g is a shapeless mx.compile of the scalar gate: per-key gates come as they are.
        g = mx.random.uniform(0.6, 1.0, (B, T, Hv, Dk))
    else:
        A_log = mx.random.uniform(-2, 0, (Hv,))
        g = gd.compute_g(A_log, mx.random.normal((B, T, Hv)).astype(dtype), mx.random.normal((Hv,)))
    beta = mx.sigmoid(b)
    state = mx.random.normal((B, Hv, Dv, Dk)) * 0.1
    return q, k, v, g, beta, state


@pytest.mark.parametrize("variant,dk,dtype", [
    ("unpacked", 64, "float32"), ("unpacked", 64, "bfloat16"), ("packed", 128, "float32"),
    ("vector_gate", 64, "float32"), ("masked", 64, "float32"),
])
def test_gated_delta_kernels_match_the_ops_fallback(variant, dk, dtype):
    gd = module_with_kernels("mlx_lm.models.gated_delta", "_gated_delta_kernel")
    mx.random.seed(11)
    B, T, Hk, Hv, Dv = 2, 5, 2, 4, 16
    q, k, v, g, beta, state = gdn_inputs(B, T, Hk, Hv, dk, Dv, getattr(mx, dtype), variant == "vector_gate")
    mask = mx.random.uniform(shape=(B, T)) > 0.3 if variant == "masked" else None
    want_y, want_state = gd.gated_delta_ops(q, k, v, g, beta, state, mask)
    kernel = gd.gated_delta_kernel_unpacked if variant == "unpacked" else gd.gated_delta_kernel
    y, new_state = kernel(q, k, v, g, beta, state, mask)
    assert y.dtype == want_y.dtype and new_state.dtype == want_state.dtype
    if mask is not None:
        # Padding steps: the kernel writes y = 0 there, the fallback the unmasked y; both keep
        # the state, and nothing reads y there.
        keep = mask[..., None, None]
        y, want_y = mx.where(keep, y, 0), mx.where(keep, want_y, 0)
    assert_close(y, want_y, dtype)
    assert_close(new_state, want_state)
    if variant == "packed":
        # mlx-lm's contract: the packed kernel equals its explicit-tree comparator bit for bit.
        yx, sx = gd.gated_delta_kernel_xtree(q, k, v, g, beta, state)
        assert mx.array_equal(y, yx) and mx.array_equal(new_state, sx)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_ssm_step_kernel_matches_ssm_attn(dtype):
    ssm = module_with_kernels("mlx_lm.models.ssm", "_ssm_kernel")
    mx.random.seed(12)
    n, h, d, g, ds = 2, 4, 8, 2, 64
    t = getattr(mx, dtype)
    x = mx.random.normal((n, 1, h, d)).astype(t)
    A_log = mx.random.uniform(-1, 1, (h,))
    B = mx.random.normal((n, 1, g, ds)).astype(t)
    C = mx.random.normal((n, 1, g, ds)).astype(t)
    D = mx.random.normal((h,))
    dt = mx.random.normal((n, 1, h)).astype(t)
    dt_bias = mx.random.normal((h,))
    state = mx.random.normal((n, h, d, ds))
    y, new_state = ssm.ssm_update_kernel(x, A_log, B, C, D, dt, dt_bias, state, (0.001, 100.0))
    want_y, want_state = ssm.ssm_attn(x, A_log, B, C, D, dt, dt_bias, state, (0.001, 100.0))
    assert y.shape == want_y.shape and new_state.shape == want_state.shape
    assert_close(y, want_y, dtype)
    assert_close(new_state, want_state)


def test_rwkv7_step_kernel_matches_the_ops_loop():
    rwkv7 = module_with_kernels("mlx_lm.models.rwkv7", "_wkv7_kernel")
    mx.random.seed(13)
    B, T, H, D = 2, 4, 2, 64
    r, k, v = (mx.random.normal((B, T, H, D)) * 0.3 for _ in range(3))
    w = mx.random.uniform(0.8, 1.0, (B, T, H, D))
    kk = mx.random.normal((B, T, H, D))
    kk = kk / mx.linalg.norm(kk, axis=-1, keepdims=True)
    a, b = -kk, kk * mx.random.uniform(0, 1, (B, T, H, D))
    state = mx.random.normal((B, H, D, D)) * 0.1
    y, new_state = rwkv7.wkv7_kernel(r, w, k, v, a, b, state)
    ref_state, ys = state, []
    for i in range(T):  # the module's own fallback (RWKV7 time mixing's _wkv7 off the GPU)
        yi, ref_state = rwkv7._wkv7_step_ops(r[:, i], w[:, i], k[:, i], v[:, i], a[:, i], b[:, i], ref_state)
        ys.append(yi)
    want_y = mx.stack(ys, axis=1).reshape(y.shape)
    assert_close(y, want_y)
    assert_close(new_state, ref_state)


@pytest.mark.parametrize("loss", ["kl_div_loss", "js_div_loss"])
def test_distillation_losses_and_their_kernel_vjps_match_the_fallback(monkeypatch, loss):
    # mlx-lm's distillation losses choose (and build) their kernels by can_run_metal(), which
    # also asks for the GPU device: switched on here, then off for the fallback.
    losses = importlib.import_module("mlx_lm.tuner.losses")
    mx.random.seed(14)
    q = mx.random.normal((3, 1500)) * 2
    p = mx.random.normal((3, 1500)) * 2
    weights = mx.random.uniform(0.5, 1.5, (3,))

    def objective(q):
        return (getattr(losses, loss)(q, p) * weights).sum()

    monkeypatch.setattr(losses, "can_run_metal", lambda: True)
    for name in ("kl_forward", "kl_backward", "js_forward", "js_backward"):
        monkeypatch.setattr(losses, f"_{name}_kernel", getattr(losses, f"_make_{name}_kernel")())
    assert isinstance(losses._kl_forward_kernel, kiln.mlx.MetalKernel)
    value, grad = mx.value_and_grad(objective)(q)
    monkeypatch.setattr(losses, "can_run_metal", lambda: False)
    want_value, want_grad = mx.value_and_grad(objective)(q)
    assert_close(value, want_value)
    assert_close(grad, want_grad)
