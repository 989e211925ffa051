"""Arrays of other frameworks as kiln array descriptors, without copies, and kiln's outputs as
arrays of the caller's framework.

A descriptor is ``(owner, address, nbytes, offset, shape, strides, dtype, ordinal)``: the span
of memory the view reaches (its lowest address and length in bytes), the view's first element
as an offset in elements from there, element strides (None: row-major, for a contiguous
tensor, whose strides on axes of one element PyTorch leaves free), kiln's dtype name and the
CUDA device ordinal (-1 for host memory). ``owner`` stays alive while kiln uses the memory.
"""

from __future__ import annotations

import sys
import weakref

import numpy as np

from ._dtypes import dtype_name, numpy_dtype, torch_dtype
from .errors import InvalidArgumentError

# Where an array lives and which framework its outputs come back in.
NUMPY = "numpy"
TORCH = "torch"


def describe(owner, address, shape, strides, itemsize, dtype, ordinal, byte_strides):
    """The descriptor of a view at ``address`` (its first element) with these strides."""
    if byte_strides:
        if any(s % itemsize for s in strides):
            raise InvalidArgumentError(
                f"[kiln] strides {tuple(strides)} are not whole elements of {itemsize} bytes"
            )
        strides = tuple(s // itemsize for s in strides)
    else:
        strides = tuple(strides)
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return (owner, address, 0, 0, tuple(shape), strides, dtype, ordinal)
        r = (n - 1) * s
        if r < 0:
            lo += r
        else:
            hi += r
    start = address + lo * itemsize
    # The lent span starts at a 64-byte boundary (same page, same allocation granule), so that
    # kiln sees a view's true alignment in its element offset, as it does for its own buffers,
    # and picks vector loads only where they are aligned.
    pad = start % 64
    if pad % itemsize:
        pad = 0
    return (owner, start - pad, (hi - lo + 1) * itemsize + pad, pad // itemsize - lo, tuple(shape), strides, dtype,
            ordinal)


def native(a: np.ndarray) -> np.ndarray:
    """``a`` in a layout kiln reads in place: native byte order and aligned elements (a copy of
    ``a`` where it is neither; the copy keeps its values)."""
    if a.dtype.isnative and a.flags.aligned:
        return a
    return np.array(a, dtype=a.dtype.newbyteorder("="), order="K")


def pinned(a: np.ndarray):
    """An owner for ``a``'s memory that keeps it at its address while kiln uses it: the array,
    and a weak reference to the array that owns the data, which makes NumPy refuse to resize
    that array (``resize(..., refcheck=False)`` from another thread) until the call is over."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return (a, weakref.ref(root)) if root.flags.owndata else a


def numpy_desc(a: np.ndarray):
    """The descriptor of a NumPy array read in place; an array of another byte order or with
    misaligned elements is described through a native copy (``native``)."""
    a = native(a)
    dtype = dtype_name(a.dtype)
    return describe(pinned(a), a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.itemsize, dtype, -1,
                    True)


def torch_desc(t, ordinal: int):
    dtype = dtype_name(t.dtype)
    itemsize = t.element_size()
    if t.is_contiguous():
        # The common case (every output, most inputs) without walking the strides in Python.
        ptr = t.data_ptr()
        pad = ptr % 64
        if pad % itemsize:
            pad = 0
        return (t, ptr - pad, t.numel() * itemsize + pad, pad // itemsize, t.shape, None, dtype, ordinal)
    return describe(t, t.data_ptr(), t.shape, t.stride(), itemsize, dtype, ordinal, False)


def torch_module():
    """PyTorch when the caller has imported it (kiln never imports it first)."""
    return sys.modules.get("torch")


def as_numpy(x) -> np.ndarray:
    """A host array-like as NumPy: lists follow MLX's rules (ints int32, floats float32)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (list, tuple)):
        a = np.asarray(x)
        if a.dtype == np.int64:
            a = a.astype(np.int32)
        elif a.dtype == np.float64:
            a = a.astype(np.float32)
        return a
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        kind, _ = x.__dlpack_device__()
        if kind == 1:
            return np.from_dlpack(x)
    return np.asarray(x)


def from_cuda_object(x):
    """A CUDA object of another framework (``__cuda_array_interface__`` or a CUDA
    ``__dlpack__``) as a PyTorch tensor over the same memory."""
    torch = torch_module()
    if torch is None:
        try:
            import torch  # noqa: F811
        except ImportError:
            raise InvalidArgumentError(
                "[kiln] CUDA arrays of other frameworks are bridged through PyTorch; install torch"
            ) from None
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    return torch.as_tensor(x, device="cuda")


def is_cuda_object(x) -> bool:
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__"):
        try:
            return x.__dlpack_device__()[0] == 2
        except Exception:
            return False
    return False


def host_output(h, lead):
    """A kiln host output as the lead input's framework (NumPy, or a PyTorch CPU tensor)."""
    a = np.asarray(h)
    if h.dtype == "bfloat16":
        a = a.view(numpy_dtype("bfloat16"))
    if lead is TORCH:
        torch = torch_module()
        if h.dtype == "bfloat16":
            return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return a


def torch_outputs(shapes, dtypes, device, init_value):
    """Fresh outputs for a launch on a CUDA tensor's device, allocated by PyTorch on its current
    stream (so its caching allocator orders their reuse after kiln's kernel)."""
    torch = torch_module()
    types = _torch_dtypes(torch)
    if init_value is None:
        return [torch.empty(s, dtype=types[d], device=device) for s, d in zip(shapes, dtypes)]
    return [torch.full(s, init_value, dtype=types[d], device=device) for s, d in zip(shapes, dtypes)]


_TORCH_DTYPES: dict = {}


def _torch_dtypes(torch) -> dict:
    """kiln's dtype names to PyTorch's dtypes (built once)."""
    if not _TORCH_DTYPES:
        from ._dtypes import NAMES

        _TORCH_DTYPES.update({n: getattr(torch, n) for n in NAMES if hasattr(torch, n)})
    return _TORCH_DTYPES
