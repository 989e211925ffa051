import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from . import errors as errors
from . import ops as ops
from .errors import (
    BackendUnavailableError as BackendUnavailableError,
    CompileError as CompileError,
    DriverError as DriverError,
    InvalidArgumentError as InvalidArgumentError,
    KernelFaultError as KernelFaultError,
    KilnError as KilnError,
    KilnIOError as KilnIOError,
    InternalError as InternalError,
    ShapeMismatchError as ShapeMismatchError,
    SpecError as SpecError,
    TimeoutError as TimeoutError,
    UnsupportedDTypeError as UnsupportedDTypeError,
)

__version__: str

# A dtype: a NumPy dtype or scalar type, ml_dtypes.bfloat16, a torch.dtype, an mlx Dtype or a
# name such as "bfloat16".
DTypeLike = Any
# A NumPy array, a PyTorch tensor, or anything with __dlpack__ / __cuda_array_interface__.
ArrayLike = Any
TemplateArg = bool | int | DTypeLike

class MetalKernel:
    name: str
    def __call__(
        self,
        *,
        inputs: Sequence[ArrayLike | bool | int | float],
        output_shapes: Sequence[Sequence[int]],
        output_dtypes: Sequence[DTypeLike],
        grid: tuple[int, int, int],
        threadgroup: tuple[int, int, int],
        template: Sequence[tuple[str, TemplateArg]] | None = None,
        init_value: float | None = None,
        verbose: bool = False,
        stream: Any = None,
        device: str | None = None,
        timeout: float | None = None,
    ) -> list[Any]: ...
    def precompile(
        self,
        *,
        inputs: Sequence[ArrayLike | bool | int | float],
        output_shapes: Sequence[Sequence[int]],
        output_dtypes: Sequence[DTypeLike],
        grid: tuple[int, int, int],
        threadgroup: tuple[int, int, int],
        template: Sequence[tuple[str, TemplateArg]] | None = None,
        device: str | None = None,
        **ignored: Any,
    ) -> None: ...
    def generate(
        self,
        *,
        inputs: Sequence[ArrayLike | bool | int | float],
        output_shapes: Sequence[Sequence[int]],
        output_dtypes: Sequence[DTypeLike],
        template: Sequence[tuple[str, TemplateArg]] | None = None,
        **ignored: Any,
    ) -> str: ...
    def compile_cuda(
        self,
        *,
        inputs: Sequence[ArrayLike | bool | int | float],
        output_shapes: Sequence[Sequence[int]],
        output_dtypes: Sequence[DTypeLike],
        template: Sequence[tuple[str, TemplateArg]] | None = None,
        arch: tuple[int, int] = (9, 0),
        **ignored: Any,
    ) -> int: ...

def check(kernel: MetalKernel | MetalLibrary | Any, **call_keywords: Any) -> list[dict[str, Any]]: ...

def metal_kernel(
    name: str,
    input_names: Sequence[str],
    output_names: Sequence[str],
    source: str,
    header: str = "",
    ensure_row_contiguous: bool = True,
    atomic_outputs: bool = False,
    compile_options: Mapping[str, str] | None = None,
) -> MetalKernel: ...

class Output(NamedTuple):
    shape: tuple[int, ...]
    dtype: DTypeLike
    init_value: float | None = None

class MetalLibrary:
    name: str
    def dispatch(
        self,
        function: str,
        buffers: Sequence[ArrayLike | bytes | Output | bool | int | float],
        *,
        threadgroup: tuple[int, int, int],
        threads: tuple[int, int, int] | None = None,
        threadgroups: tuple[int, int, int] | None = None,
        threadgroup_memory: Sequence[int] = (),
        constants: Mapping[int | str, bool | int | float] | None = None,
        device: str | None = None,
        stream: Any = None,
        timeout: float | None = None,
    ) -> list[Any]: ...

def metal_library(
    name: str,
    source: str,
    math_mode: str = "safe",
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    defines: Mapping[str, str | int | float | bool | None] | Sequence[tuple[str, str | int | float | bool | None]] | None = None,
) -> MetalLibrary: ...
def metal_library_file(
    path: str | os.PathLike[str],
    math_mode: str = "safe",
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    defines: Mapping[str, str | int | float | bool | None] | Sequence[tuple[str, str | int | float | bool | None]] | None = None,
) -> MetalLibrary: ...
def cuda_available() -> bool: ...
def cuda_status() -> str: ...
def devices() -> list[tuple[str, str]]: ...
def nvrtc_version() -> tuple[int, int]: ...

class custom_function:
    fun: Callable[..., Any]
    vjp_fun: Callable[..., Any] | None
    jvp_fun: Callable[..., Any] | None
    def __init__(self, f: Callable[..., Any]) -> None: ...
    def vjp(self, f: Callable[[Any, Any, Any], Any]) -> custom_function: ...
    def jvp(self, f: Callable[[Any, Any], Any]) -> custom_function: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def vjp(fun: Callable[..., Any], primals: Sequence[Any], cotangents: Sequence[Any]) -> tuple[list[Any], list[Any]]: ...
def jvp(fun: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[list[Any], list[Any]]: ...
def grad(fun: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]: ...
def value_and_grad(fun: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., tuple[Any, Any]]: ...

class DebugValues(dict[str, Any]):
    def table(self, limit: int | None = None) -> str: ...

class DebugBuffer:
    slots: tuple[str, ...]
    threads: int
    per_thread: int
    dtype: Any
    name: str
    prefix: str
    @property
    def stride(self) -> int: ...
    @property
    def shape(self) -> tuple[int]: ...
    def slot(self, name: str) -> int: ...
    def output(self) -> Output: ...
    def header(self) -> str: ...
    def read(self, array: ArrayLike, limit: int = 32) -> DebugValues: ...

def debug_buffer(
    slots: Sequence[str],
    threads: int | Sequence[int],
    per_thread: int = 1,
    dtype: DTypeLike = ...,
    name: str = "dbg",
    prefix: str = "DBG_",
) -> DebugBuffer: ...
