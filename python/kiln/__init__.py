"""kiln: MLX-style Metal kernels (``mx.fast.metal_kernel`` bodies and whole ``.metal`` files)
on NumPy arrays and PyTorch tensors — NVIDIA GPUs through NVRTC, any CPU through an exact
emulator. Zero-copy, on the caller's device and stream.

>>> import numpy as np, kiln
>>> kernel = kiln.metal_kernel("myexp", ["inp"], ["out"], '''
...     uint elem = thread_position_in_grid.x;
...     out[elem] = metal::exp(inp[elem]);
... ''')
>>> a = np.linspace(0, 1, 64, dtype=np.float32)
>>> (out,) = kernel(inputs=[a], output_shapes=[a.shape], output_dtypes=[a.dtype],
...                 grid=(64, 1, 1), threadgroup=(256, 1, 1))
"""

from . import _nvrtc

_nvrtc.preload()

from . import errors, ops  # noqa: E402
from ._custom_function import custom_function, grad, jvp, value_and_grad, vjp
from ._debug import DebugBuffer, DebugValues, debug_buffer
from ._check import check
from ._kernel import MetalKernel, MetalLibrary, Output, metal_kernel, metal_library, metal_library_file
from ._kiln import cuda_status as _cuda_status
from ._kiln import devices as _devices
from ._kiln import nvrtc_version
from .errors import (
    BackendUnavailableError,
    CompileError,
    DriverError,
    InvalidArgumentError,
    KernelFaultError,
    KilnError,
    KilnIOError,
    InternalError,
    ShapeMismatchError,
    SpecError,
    TimeoutError,
    UnsupportedDTypeError,
)

__version__ = "0.1.0"


def cuda_available() -> bool:
    """Whether kiln's CUDA backend can run here (driver, NVRTC and a device)."""
    return _cuda_status()[0]


def cuda_status() -> str:
    """The CUDA devices kiln sees, or why the CUDA backend cannot run here."""
    return _cuda_status()[1]


def __getattr__(name):
    # kiln.torch imports PyTorch, so it loads on first use rather than with kiln.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


def devices() -> list[tuple[str, str]]:
    """Every device kiln can run on, with a one-line description (``kiln devices``)."""
    return _devices()


__all__ = [
    "check",
    "metal_kernel",
    "metal_library",
    "metal_library_file",
    "MetalKernel",
    "MetalLibrary",
    "Output",
    "debug_buffer",
    "DebugBuffer",
    "DebugValues",
    "ops",
    "errors",
    "custom_function",
    "vjp",
    "jvp",
    "grad",
    "value_and_grad",
    "cuda_available",
    "cuda_status",
    "devices",
    "nvrtc_version",
    "KilnError",
    "InvalidArgumentError",
    "ShapeMismatchError",
    "UnsupportedDTypeError",
    "CompileError",
    "BackendUnavailableError",
    "DriverError",
    "TimeoutError",
    "KernelFaultError",
    "SpecError",
    "KilnIOError",
    "InternalError",
]
