"""MLX arrays as kiln arrays (``_kiln.LentArray``) through their DLPack capsules, without copies.

MLX exports every dtype kiln supports through ``__dlpack__`` (bfloat16 included, which NumPy's
importer refuses), with the array's strides and byte offset, on the CPU and on CUDA. The capsule
is read with ctypes and kept alive beside the array while kiln uses the memory; its destructor
releases it as usual, since it is never marked consumed.
"""

from __future__ import annotations

import ctypes

from .. import _kiln
from ..errors import UnsupportedDTypeError


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# DLPack device types: host memory, CUDA device memory, CUDA managed memory.
CPU, CUDA, CUDA_MANAGED = 1, 2, 13

# (type code, bits) -> kiln's dtype name. Codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_DTYPES = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (4, 16): "bfloat16", (6, 8): "bool",
}


def describe_dlpack(array, host: bool = False):
    """The ``LentArray`` of an evaluated array with ``__dlpack__`` (its memory in place);
    ``host``: CUDA managed memory is described as host memory, for the CPU emulator."""
    capsule = array.__dlpack__()
    t = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))
    code, bits = t.dtype.code, t.dtype.bits
    dtype = _DTYPES.get((code, bits))
    if dtype is None or t.dtype.lanes != 1:
        raise UnsupportedDTypeError(f"[kiln.mlx] unsupported dtype {array.dtype} (DLPack code {code}, {bits} bits)")
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(ndim))
    else:
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= n
        strides = tuple(reversed(strides))
    kind = t.device.device_type
    ordinal = -1 if kind == CPU else t.device.device_id
    address = (t.data or 0) + t.byte_offset
    if kind == CPU and not host and mlx_has_cuda():
        # MLX's CUDA build keeps arrays in CUDA managed memory and exports them as host memory:
        # such memory is run on its GPU, not on the emulator.
        ordinal = managed_ordinal(t.data or 0)
    return _kiln.LentArray.from_memory((array, capsule), address, shape, strides, dtype, ordinal)


def device_kind(array) -> int:
    """The DLPack device type of an array (1 host, 2 CUDA, 13 CUDA managed)."""
    return array.__dlpack_device__()[0]


_cuda = {}


def mlx_has_cuda() -> bool:
    """Whether the MLX in this process is its CUDA build with a GPU."""
    if "mlx" not in _cuda:
        import mlx.core as mx

        _cuda["mlx"] = bool(getattr(getattr(mx, "cuda", None), "is_available", lambda: False)())
    return _cuda["mlx"]


def libcuda():
    """The CUDA driver library, initialised (loaded once); None without a driver."""
    if "lib" not in _cuda:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuInit(0)
        except OSError:
            lib = None
        _cuda["lib"] = lib
    return _cuda["lib"]


def managed_ordinal(pointer: int) -> int:
    """The GPU of a CUDA managed allocation, else -1 (plain host memory, or no CUDA driver)."""
    lib = libcuda() if pointer else None
    if lib is None:
        return -1
    # CU_POINTER_ATTRIBUTE_IS_MANAGED (8) and CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9).
    managed, ordinal = ctypes.c_uint(0), ctypes.c_int(-1)
    if lib.cuPointerGetAttribute(ctypes.byref(managed), 8, ctypes.c_uint64(pointer)) != 0 or not managed.value:
        return -1
    if lib.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(pointer)) != 0:
        return -1
    return ordinal.value
