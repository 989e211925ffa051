"""What :func:`kiln.check` and the pytest plugin's ``--kiln-check`` share: a kernel made by the MLX
drop-in (:mod:`kiln.mlx`) checked as the kiln kernel it wraps, a call's arrays read on the host
(the sanitizer runs on the CPU emulator), and :func:`checking`, a scope in which every kernel call
also runs under the sanitizer."""

from __future__ import annotations

import contextlib

import numpy as np

from ._kernel import MetalKernel, MetalLibrary
from .errors import InvalidArgumentError

__all__ = ["check", "unwrap", "checking", "render"]


def _is_mlx(x) -> bool:
    return (type(x).__module__ or "").startswith("mlx")


def _host(x):
    """``x`` as an array the emulator reads: MLX arrays as NumPy, PyTorch tensors on the CPU;
    anything else as it is."""
    if _is_mlx(x) and hasattr(x, "dtype"):
        import mlx.core as mx

        mx.eval(x)
        if x.dtype == mx.bfloat16:
            from ._dtypes import numpy_dtype

            return np.asarray(x.view(mx.uint16)).view(numpy_dtype("bfloat16"))
        return np.asarray(x)
    if (type(x).__module__ or "").startswith("torch") and hasattr(x, "detach"):
        return x.detach().to("cpu")
    return x


def _host_copy(x):
    """A host copy of a bound buffer, so a checked dispatch never writes the caller's memory."""
    x = _host(x)
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True)
    if (type(x).__module__ or "").startswith("torch") and hasattr(x, "clone"):
        return x.clone()
    return x


def _dropin_kernel(kernel):
    """The kiln kernel a :class:`kiln.mlx.MetalKernel` wraps, or None for anything else."""

    inner = getattr(kernel, "_kiln", None)
    if type(kernel).__module__.startswith("kiln.mlx") and isinstance(inner, MetalKernel):
        return inner
    return None


def unwrap(kernel, keywords: dict):
    """The kernel and call keywords :func:`kiln.check` runs: a drop-in MLX kernel becomes the
    kiln kernel it wraps, and the call's arrays (MLX, PyTorch on a GPU) are read on the host."""
    inner = _dropin_kernel(kernel)
    if inner is not None:
        kernel = inner
    keywords = dict(keywords)
    if "inputs" in keywords and not isinstance(keywords["inputs"], (str, bytes)):
        keywords["inputs"] = [_host(x) for x in keywords["inputs"]]
    if "buffers" in keywords and not isinstance(keywords["buffers"], (str, bytes)):
        keywords["buffers"] = [_host_copy(x) for x in keywords["buffers"]]
    for key in ("device", "stream", "timeout", "verbose"):
        keywords.pop(key, None)
    return kernel, keywords


def render(finding: dict) -> str:
    """One finding as ``kiln check`` prints it: the headline, then its lines."""
    out = f"{finding.get('severity')}[{finding.get('kind')}] {finding.get('kernel')}: {finding.get('message')}"
    part = finding.get("part") or "body"
    lines = ((finding.get("line"), finding.get("text"), finding.get("file")),
             (finding.get("other_line"), finding.get("other_text"), finding.get("other_file")))
    for line, text, file in lines:
        if line is not None:
            # A line of a header the file includes is named by that header.
            out += f"\n  {file or part} line {line} | {(text or '').rstrip()}"
    return out


@contextlib.contextmanager
def checking():
    """A scope in which every call of a kiln kernel (``kiln.metal_kernel``, the MLX drop-in's
    ``mx.fast.metal_kernel``, ``MetalLibrary.dispatch``) is first run under the sanitizer on the
    host, then as asked. Yields the list the findings go to (dicts as :func:`kiln.check` returns
    them; a call the sanitizer could not run adds an ``error`` of kind ``check-failed``)."""
    found: list = []

    def run_check(kernel, name, keywords):
        try:
            found.extend(check(kernel, **keywords))
        except Exception as e:  # the call itself runs next and raises what it raises
            found.append({"kind": "check-failed", "severity": "error", "kernel": name, "line": None,
                          "message": f"kiln.check could not run this call: {type(e).__name__}: {e}"})

    def kernel_call(original):
        def call(self, *args, **keywords):
            if not args:
                run_check(self, getattr(self, "name", "kernel"), keywords)
            return original(self, *args, **keywords)

        return call

    def library_dispatch(original):
        def dispatch(self, function, buffers, **keywords):
            run_check(self, f"{getattr(self, 'name', 'library')}:{function}",
                      dict(keywords, function=function, buffers=buffers))
            return original(self, function, buffers, **keywords)

        return dispatch

    patched = [(MetalKernel, "__call__", kernel_call), (MetalLibrary, "dispatch", library_dispatch)]
    try:
        from . import mlx as kiln_mlx

        patched.append((kiln_mlx.MetalKernel, "__call__", kernel_call))
    except ImportError:
        pass
    saved = []
    for cls, attr, wrap in patched:
        saved.append((cls, attr, cls.__dict__.get(attr)))
        setattr(cls, attr, wrap(getattr(cls, attr)))
    try:
        yield found
    finally:
        for cls, attr, own in reversed(saved):
            if own is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, own)


def check(kernel, **call_keywords):
    """Runs one call of ``kernel`` (a :class:`MetalKernel`, or a kernel of the MLX drop-in's
    ``mx.fast.metal_kernel``, with the keywords a call takes) on the CPU emulator under kiln's
    sanitizer and returns its findings: a list of dicts with ``kind`` (``race``,
    ``uninitialized-read``, ``unwritten-output``, ``barrier-divergence``, ``out-of-bounds``),
    ``severity`` (``"error"`` or ``"warning"``), ``kernel``, ``line`` (1-based in the body, header
    or file; ``part`` says which), ``text`` (that line), ``threads``, ``buffer``, ``index``,
    ``count`` and ``message``. An empty list means nothing was found. A :class:`MetalLibrary`
    takes :meth:`MetalLibrary.dispatch`'s keywords (``function=``, ``buffers=``,
    ``threadgroup=``, ``threads=`` or ``threadgroups=``, ...). Arrays on a GPU (MLX, PyTorch) are
    read on the host, and buffers a dispatch would write are copies."""
    kernel, call_keywords = unwrap(kernel, call_keywords)
    if isinstance(kernel, MetalLibrary):
        return kernel._check(**call_keywords)
    if not isinstance(kernel, MetalKernel):
        raise InvalidArgumentError(
            "kiln.check takes a kernel from kiln.metal_kernel, kiln.metal_library or the MLX drop-in "
            f"(kiln.mlx), not {type(kernel).__name__}"
        )
    return kernel._check(**call_keywords)
