"""Arrays of other frameworks for the extension, without copies, and kiln's outputs as arrays of
the caller's framework. The extension reads NumPy arrays and PyTorch tensors itself (as
``_kiln.LentArray``); here other objects (lists, DLPack and CUDA-array-interface exports) become
one of those first.
"""

from __future__ import annotations

import sys

import numpy as np

from ._dtypes import numpy_dtype
from .errors import InvalidArgumentError, UnsupportedDTypeError

# Where an array lives and which framework its outputs come back in.
NUMPY = "numpy"
TORCH = "torch"


def native(a: np.ndarray) -> np.ndarray:
    """``a`` in a layout kiln reads in place: native byte order and aligned elements (a copy of
    ``a`` where it is neither; the copy keeps its values)."""
    if a.dtype.isnative and a.flags.aligned:
        return a
    return np.array(a, dtype=a.dtype.newbyteorder("="), order="K")


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


def as_array(x):
    """``x`` (a list, a DLPack or CUDA-array-interface export, anything NumPy reads) as a NumPy
    array or a PyTorch tensor over the same data; lists follow MLX's rules (``as_numpy``)."""
    if is_cuda_object(x):
        return from_cuda_object(x)
    a = as_numpy(x)
    if a.dtype == object:
        raise UnsupportedDTypeError(f"[kiln] {type(x).__name__} is not an array kiln can read")
    return a


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
    if lead == TORCH:
        torch = torch_module()
        if h.dtype == "bfloat16":
            return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return a
