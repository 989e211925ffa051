"""kiln.ops: kiln's kernel library, named and parameterised as MLX names it where MLX has the
op (``mx.fast.rms_norm``, ``mx.fast.rope``, ``mx.fast.scaled_dot_product_attention``,
``mx.softmax``, ``mx.linalg.cholesky``, ``mx.linalg.qr``, ``mlx.nn`` activations); the others
are documented with their own layouts below.

Ops return arrays of their first input's kind on its device. Ops that are one kernel launch
(``exp``, ``silu``, ``gelu``, ``gelu_approx``, ``rms_norm``, ``residual_rms_norm``,
``softmax``, ``rope``, ``scatter_add``, ``overlap_add``) run anywhere: NumPy arrays and PyTorch
CPU tensors on the CPU emulator, PyTorch CUDA tensors on their GPU, queued on PyTorch's current
stream into outputs PyTorch allocates (as :func:`kiln.metal_kernel` does). The others
(``scaled_dot_product_attention``, ``grid_sample``, ``grid_sample_vjp``, ``cholesky``, ``qr``,
``gdn_chunk_scaled_dot_kkt``) may take several launches; on PyTorch CUDA tensors every launch is
queued on PyTorch's current stream and the outputs are PyTorch's (strided inputs are first made
contiguous by PyTorch, as MLX copies them; intermediate buffers are kiln's). ``cholesky`` and
``qr`` factor matrices of any size there (up to 64 x 64 in one kernel, larger ones by kiln's
blocked launches, whose outputs are PyTorch's tensors updated in place), and ``cholesky`` reads
8 bytes back to report a matrix that is not positive definite, as on the host.
"""

from __future__ import annotations

from typing import Any

from . import _kiln
from ._abstract import empty_outputs, is_describing
from ._arrays import NUMPY, TORCH, as_numpy, host_output, torch_module
from ._kernel import _DeviceGuard
from . import _validate as check_arg
from ._validate import named
from .errors import InvalidArgumentError, KilnError, UnsupportedDTypeError

# Any array kiln reads: NumPy arrays and what converts to them, PyTorch tensors, MLX arrays.
ArrayLike = Any

__all__ = [
    "exp", "silu", "gelu", "gelu_approx", "rms_norm", "residual_rms_norm", "softmax", "rope",
    "scaled_dot_product_attention", "grid_sample", "grid_sample_vjp", "scatter_add", "overlap_add",
    "cholesky", "qr", "gdn_chunk_scaled_dot_kkt",
]


def _desc(x):
    torch = torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        return _kiln.lend(x), TORCH
    a = as_numpy(x)
    if a.dtype == object:
        raise UnsupportedDTypeError(f"[kiln] {type(x).__name__} is not an array kiln can read")
    return _kiln.lend(a), NUMPY


def _descs(op, arrays):
    """The descriptors and frameworks (NUMPY, TORCH) of an op's array arguments; a conversion
    error names the op and the argument (its position among the op's arrays)."""
    out = []
    for k, a in enumerate(arrays):
        try:
            out.append(_desc(a))
        except KilnError as e:
            raise named(op, f"array argument {k}", e) from None
    return tuple(d for d, _ in out), tuple(kind for _, kind in out)


def _planner(op, params):
    """The plan of registry op ``op`` with scalar ``params``, as a function of its arrays."""
    numbers = [float(p) for p in params]

    def make(*arrays):
        return _kiln.plan_op(op, list(arrays), numbers)

    return make


def _plan(op, arrays, *params, like_x=1, views=False, make=None):
    """Runs op ``op`` (its name in the registry, ``kiln._kiln.plan_op``; ``make`` another plan of
    the arrays) on ``arrays`` with scalar ``params``: on a CUDA tensor's stream into PyTorch
    outputs, else into kiln's. While describing (``kiln.torch.custom_op``'s fake), the op's
    ``like_x`` outputs have the shape and dtype of ``x``. Ops whose kernel reads any view
    (``views``) take strided CUDA tensors as they are; the others get them made contiguous by
    PyTorch, on its current stream (a kernel's own copy would run on kiln's stream, unordered with
    the caller's)."""
    make = make or _planner(op, params)
    if is_describing():
        if like_x is None:
            raise InvalidArgumentError("[kiln.ops] this op cannot describe its outputs; give the custom op a fake=")
        x = arrays[0]
        return empty_outputs("kiln.ops", arrays, [x.shape] * like_x, [x.dtype] * like_x)
    torch = torch_module()
    if torch is not None and isinstance(arrays[0], torch.Tensor) and arrays[0].is_cuda:
        # PyTorch CUDA tensors go to the extension as they are (it reads them, allocates the
        # outputs with PyTorch and queues the calls under a device guard).
        if not views:
            arrays = [a.contiguous() if _on_cuda(a) and not a.is_contiguous() else a for a in arrays]
        lead = arrays[0]
        # Planning may set the device up or upload to it (attention's tensor maps): under the
        # guard too, so the current device stays the caller's.
        with _DeviceGuard(lead.get_device()):
            plan = make(*(a if isinstance(a, torch.Tensor) else _descs(op, [a])[0][0] for a in arrays))
        return plan.run_torch(lead)
    descs, kinds = _descs(op, arrays)
    return [host_output(h, kinds[0]) for h in make(*descs).run()]


def _on_cuda(x) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor) and x.is_cuda


def _plan_on_cuda(op, arrays, *params):
    """An op's kernel calls on PyTorch CUDA tensors: all on the current stream, the outputs
    PyTorch's. Inputs are made contiguous by PyTorch on that stream (a kernel's own copy of a
    strided input would run on kiln's stream)."""
    return _plan(op, arrays, *params, like_x=None)


def _run(op, arrays, *params):
    """An op of several launches on host arrays (the whole plan, run here)."""
    if is_describing():
        raise InvalidArgumentError("[kiln.ops] ops of several launches run on host arrays only; give the custom op a fake=")
    descs, kinds = _descs(op, arrays)
    lead = kinds[0]
    plan = _planner(op, params)(*descs)
    return [host_output(h, lead) for h in plan.run()]


def exp(x: ArrayLike) -> Any:
    """``mx.exp``: the exponential, elementwise, of any float view (no copy)."""
    return _plan("exp", [x], views=True)[0]


def silu(x: ArrayLike) -> Any:
    """``mlx.nn.silu``: ``x * sigmoid(x)``, elementwise."""
    return _plan("silu", [x], views=True)[0]


def gelu_approx(x: ArrayLike) -> Any:
    """``mlx.nn.gelu_approx``: the tanh approximation of GELU, elementwise."""
    return _plan("gelu_approx", [x], views=True)[0]


def gelu(x: ArrayLike) -> Any:
    """``mlx.nn.gelu``: the exact (erf) GELU, elementwise."""
    return _plan("gelu", [x], views=True)[0]


def rms_norm(x: ArrayLike, weight: ArrayLike, eps: float) -> Any:
    """``mx.fast.rms_norm(x, weight, eps)``: normalises the last axis, f32 accumulation."""
    return _plan("rms_norm", [x, weight], check_arg.number("rms_norm", "eps", eps))[0]


def residual_rms_norm(x: ArrayLike, residual: ArrayLike, weight: ArrayLike, eps: float) -> tuple[Any, Any]:
    """kiln's fused residual add + RMS norm: returns ``(rms_norm(x + residual, weight, eps),
    x + residual)``."""
    return tuple(_plan("residual_rms_norm", [x, residual, weight], check_arg.number("residual_rms_norm", "eps", eps),
                       like_x=2))


def softmax(x: ArrayLike, axis: int = -1) -> Any:
    """``mx.softmax(x, axis=-1)`` over the last axis (online max and sum, rows of any length)."""
    if axis not in (-1, getattr(x, "ndim", 1) - 1):
        raise InvalidArgumentError("[softmax] kiln.ops.softmax runs over the last axis")
    return _plan("softmax", [x])[0]


def rope(a: ArrayLike, dims: int, *, traditional: bool, base: float, scale: float, offset: int,
         freqs: None = None) -> Any:
    """``mx.fast.rope(a, dims, *, traditional, base, scale, offset)``: rotary embeddings of the
    first ``dims`` features of the last axis at positions ``offset + row`` (``freqs`` is not
    supported)."""
    if freqs is not None:
        raise InvalidArgumentError("[rope] kiln.ops.rope takes base, not freqs")
    return _plan("rope", [a], check_arg.count("rope", "dims", dims), float(bool(traditional)),
                 check_arg.number("rope", "base", base), check_arg.number("rope", "scale", scale),
                 check_arg.count("rope", "offset", offset, -(2**31), 2**31))[0]


def scaled_dot_product_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, scale: float,
                                 mask: ArrayLike | str | None = None) -> Any:
    """``mx.fast.scaled_dot_product_attention(q, k, v, *, scale, mask=None)``: q (B, Hq, Tq, D),
    k and v (B, Hkv, Tk, D) with Hq a multiple of Hkv (grouped-query heads); ``mask`` None,
    ``"causal"`` or an additive array broadcastable to (B, Hq, Tq, Tk)."""
    op = "scaled_dot_product_attention"
    scale = check_arg.number(op, "scale", scale)
    causal = isinstance(mask, str) and mask == "causal"
    if isinstance(mask, str) and not causal:
        raise InvalidArgumentError(f"[{op}] mask must be None, 'causal' or an array, got {mask!r}")
    arrays = [q, k, v] if mask is None or causal else [q, k, v, mask]
    params = (scale, float(causal))
    if _on_cuda(q):
        return _plan_on_cuda(op, arrays, *params)[0]
    return _run(op, arrays, *params)[0]


def grid_sample(x: ArrayLike, grid: ArrayLike) -> Any:
    """Bilinear grid sampling with zeros padding (align_corners=False): x (B, H, W, C) NHWC,
    grid (B, gH, gW, 2) in [-1, 1]; returns (B, gH, gW, C). The MLX docs' custom-kernel example."""
    if _on_cuda(x):
        return _plan_on_cuda("grid_sample", [x, grid])[0]
    return _run("grid_sample", [x, grid])[0]


def grid_sample_vjp(x: ArrayLike, grid: ArrayLike, cotangent: ArrayLike) -> tuple[Any, Any]:
    """The VJP of :func:`grid_sample`: returns ``(x_grad, grid_grad)`` in float32."""
    if _on_cuda(x):
        # The kernel accumulates in float32; PyTorch casts to the inputs' dtypes on the stream.
        dx, dg = _plan("grid_sample_vjp", [x, grid, cotangent], like_x=None, make=_kiln.plan_grid_sample_vjp_kernel)
        return dx.to(x.dtype), dg.to(grid.dtype)
    return tuple(_run("grid_sample_vjp", [x, grid, cotangent]))


def scatter_add(values: ArrayLike, indices: ArrayLike, bins: int) -> Any:
    """Sums ``values`` (M, ...) into ``bins`` rows by ``indices`` (M,), duplicates included."""
    return _plan("scatter_add", [values, indices], check_arg.count("scatter_add", "bins", bins), like_x=None)[0]


def overlap_add(frames: ArrayLike, hop: int) -> Any:
    """Overlap-adds ``frames`` (..., n_frames, frame_len) with hop ``hop`` (an inverse STFT's
    last step)."""
    return _plan("overlap_add", [frames], check_arg.count("overlap_add", "hop", hop), like_x=None)[0]


def cholesky(a: ArrayLike) -> Any:
    """``mx.linalg.cholesky(a)`` (lower): batched; a matrix that is not positive definite is an
    error naming its batch index."""
    if _on_cuda(a):
        return _plan_on_cuda("cholesky", [a])[0]
    return _run("cholesky", [a])[0]


def qr(a: ArrayLike) -> tuple[Any, Any]:
    """``mx.linalg.qr(a)``: batched Householder QR, returns ``(q, r)``."""
    if _on_cuda(a):
        return tuple(_plan_on_cuda("qr", [a]))
    return tuple(_run("qr", [a]))


def gdn_chunk_scaled_dot_kkt(k: ArrayLike, beta: ArrayLike, g: ArrayLike, chunk: int = 64) -> Any:
    """Gated delta net ``chunk_scaled_dot_kkt``: ``k`` (B, T, Hg, K), ``beta`` and ``g``
    (B, T, H) float32 with H a multiple of Hg; returns ``A`` (B, T, H, chunk) float32, per chunk
    the strictly lower-triangular ``beta_i * exp(g_i - g_j) * <k_i, k_j>``."""
    chunk = check_arg.count("gdn_chunk_scaled_dot_kkt", "chunk", chunk)
    if _on_cuda(k):
        return _plan_on_cuda("gdn_chunk_scaled_dot_kkt", [k, beta, g], chunk)[0]
    return _run("gdn_chunk_scaled_dot_kkt", [k, beta, g], chunk)[0]
