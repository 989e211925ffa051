"""Dtypes as kiln names them (NumPy's and MLX's names), from whatever the caller passes:
NumPy dtypes and scalar types, ``ml_dtypes.bfloat16``, PyTorch dtypes, MLX dtypes or names.
Neither PyTorch nor MLX is imported here: their dtypes are recognised by name."""

from __future__ import annotations

import numpy as np

from .errors import UnsupportedDTypeError

NAMES = (
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32",
)

_cache: dict = {}


def dtype_name(d) -> str:
    """kiln's name of the dtype ``d`` (raises :class:`UnsupportedDTypeError`)."""
    try:
        return _cache[d]
    except (KeyError, TypeError):
        pass
    name = _resolve(d)
    try:
        _cache[d] = name
    except TypeError:
        pass
    return name


def _resolve(d) -> str:
    if isinstance(d, str):
        name = d
    else:
        module = type(d).__module__ or ""
        if module.startswith("torch"):
            # torch.float32 prints as "torch.float32"
            name = str(d).rpartition(".")[2]
        elif module.startswith("mlx"):
            # mx.float32 prints as "mlx.core.float32"
            name = str(d).rpartition(".")[2]
        else:
            try:
                name = np.dtype(d).name
            except TypeError:
                raise UnsupportedDTypeError(f"[kiln] {d!r} is not a dtype") from None
    name = {"bool_": "bool", "float": "float32", "half": "float16"}.get(name, name)
    if name not in NAMES:
        raise UnsupportedDTypeError(f"[kiln] unsupported dtype {name!r} (kiln supports {', '.join(NAMES)})")
    return name


def numpy_dtype(name: str):
    """The NumPy dtype of a kiln name (bfloat16 is ``ml_dtypes.bfloat16``)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def torch_dtype(name: str):
    """The PyTorch dtype of a kiln name."""
    import torch

    return getattr(torch, name)
