"""``kiln.metal_kernel`` and ``kiln.metal_library``: MLX's contract on NumPy arrays, PyTorch
tensors and anything with ``__dlpack__`` or ``__cuda_array_interface__``, zero-copy, on the
caller's device and (for PyTorch CUDA tensors) the caller's current stream."""

from __future__ import annotations

import inspect
import json
from typing import NamedTuple

import numpy as np

from . import _kiln
from ._arrays import (
    as_numpy,
    host_output,
    is_cuda_object,
    torch_module,
)
from ._abstract import empty_outputs, is_describing
from ._validate import scalar
from . import _validate as check_arg
from .errors import InvalidArgumentError

_MATH_MODES = ("safe", "relaxed", "fast")


def _math_mode(op, compile_options) -> str:
    if compile_options is None:
        return "safe"
    if not isinstance(compile_options, dict):
        raise InvalidArgumentError(f"[{op}] expected compile_options to be a dict")
    for key in compile_options:
        if key != "math_mode":
            raise InvalidArgumentError(f"[{op}] unknown compile option {key!r}")
    mode = compile_options.get("math_mode", "safe")
    if mode not in _MATH_MODES:
        raise InvalidArgumentError(f"[{op}] expected math_mode 'safe', 'relaxed' or 'fast', got {mode!r}")
    return mode


class _Inputs:
    """Arrays (and scalars) read by the extension as a kernel call reads its inputs
    (``_kiln.read_inputs``): ``descs`` the values the extension's calls take (``LentArray`` and
    Python scalars), ``lead`` the framework of the lead array (``"numpy"`` or ``"torch"``),
    ``ordinal`` its CUDA device (-1: host) and ``device`` the lead tensor's ``torch.device``."""

    __slots__ = ("descs", "lead", "ordinal", "device")

    def __init__(self, inputs, ensure_row_contiguous: bool, op: str = "kiln", names=()):
        self.descs, self.lead, self.ordinal, lead = _kiln.read_inputs(op, list(names), inputs, ensure_row_contiguous)
        self.device = None if lead is None else lead.device


def _stream_handle(stream, ordinal):
    torch = torch_module()
    if stream is None:
        # The raw handle without building a Stream object (what Triton's launcher reads too).
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(ordinal)
        return torch.cuda.current_stream(ordinal).cuda_stream
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        raise InvalidArgumentError(f"[kiln] stream must be a torch.cuda.Stream or a CUstream handle, got {stream!r}")
    return handle


def _require_torch_for(stream):
    torch = torch_module()
    if torch is None:
        raise InvalidArgumentError(f"[kiln] stream={stream!r} needs PyTorch (CUDA streams are PyTorch's)")
    return torch


def _current_device() -> int:
    """PyTorch's current CUDA device (read without building Python objects where possible)."""
    torch = torch_module()
    current = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
    return current()


class _DeviceGuard:
    """``torch.cuda.device(ordinal)`` only when it is not the current device already."""

    __slots__ = ("ordinal", "guard")

    def __init__(self, ordinal):
        self.ordinal = ordinal
        self.guard = None

    def __enter__(self):
        torch = torch_module()
        current = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
        if current() != self.ordinal:
            self.guard = torch.cuda.device(self.ordinal)
            self.guard.__enter__()

    def __exit__(self, *exc):
        if self.guard is not None:
            self.guard.__exit__(*exc)


def _call_keywords(*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, init_value=None,
                   verbose=False, stream=None, device=None, timeout=None):
    """The keywords a :class:`MetalKernel` call takes (its signature for ``inspect``)."""


class _CallSignature:
    """A kernel's ``__signature__``: its call's keywords (the call is the extension's, which
    ``inspect`` cannot read); the class itself keeps its constructor's signature."""

    def __get__(self, kernel, owner):
        if kernel is None:
            raise AttributeError("__signature__")
        return inspect.signature(_call_keywords)


class MetalKernel(_kiln.MetalKernel):
    """A kernel built by :func:`metal_kernel`. Call it with MLX's keyword arguments:
    ``kernel(*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
    init_value=None, verbose=False, stream=None, device=None, timeout=None)`` returns the outputs,
    one per output name.

    ``inputs`` are arrays (NumPy, PyTorch, DLPack or CUDA-array-interface objects) or Python
    scalars; ``grid`` counts threads; ``template`` is an ordered list of ``(name, value)`` with
    bool, int or dtype values; ``init_value`` fills every output first; ``verbose`` prints the
    generated Metal source. ``stream`` (a ``torch.cuda.Stream`` or a raw ``CUstream``) queues a
    CUDA launch there instead of on PyTorch's current stream; ``device="cuda:N"`` copies NumPy
    inputs to that GPU and returns NumPy outputs. ``timeout`` (seconds) stops a kernel on the CPU
    that runs longer with :class:`kiln.TimeoutError` (a running CUDA kernel cannot be stopped, so
    it applies to the CPU only); a ``signal.alarm`` handler that raises stops it too, as Ctrl-C does.

    The call itself is kiln's extension (``_kiln.MetalKernel.__call__``), which checks the
    keywords, reads the arrays and runs the kernel; only a call while PyTorch traces or with an
    explicit ``stream`` comes back to Python (:meth:`_call_glue`).
    """

    __slots__ = ("_ensure_row_contiguous", "name", "input_names", "output_names")
    __signature__ = _CallSignature()

    def __new__(cls, name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                compile_options):
        op = f"metal_kernel {check_arg.text('metal_kernel', 'name', name)}"
        input_names = check_arg.names(op, "input_names", input_names)
        output_names = check_arg.names(op, "output_names", output_names)
        if len(output_names) == 0:
            raise InvalidArgumentError(f"[{op}] must specify at least one output")
        return super().__new__(
            cls, name, input_names, output_names, check_arg.text(op, "source", source),
            check_arg.text(op, "header", header), bool(ensure_row_contiguous), bool(atomic_outputs),
            _math_mode(op, compile_options),
        )

    def __init__(self, name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                 compile_options):
        self._ensure_row_contiguous = bool(ensure_row_contiguous)
        self.name = name
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def _call_glue(self, inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, verbose,
                   stream, device, timeout=None):
        """The two calls the extension leaves to Python: one while PyTorch traces (the outputs
        described, nothing run) and one with an explicit CUDA ``stream``, made again inside
        PyTorch's stream context, so PyTorch allocates the outputs (and any input copy) on that
        stream too and its caching allocator orders their reuse after the kernel."""
        if is_describing():
            return empty_outputs(f"metal_kernel {self.name}", inputs, output_shapes, output_dtypes)
        torch = _require_torch_for(stream)
        with torch.cuda.stream(stream if isinstance(stream, torch.cuda.Stream) else torch.cuda.ExternalStream(stream)):
            return self(inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes, grid=grid,
                        threadgroup=threadgroup, template=template, init_value=init_value, verbose=verbose,
                        device=device, timeout=timeout)

    def _check(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, init_value=None,
               **_ignored):
        return json.loads(self._check_json(inputs, output_shapes, output_dtypes, grid, threadgroup, template,
                                           init_value))

    def precompile(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
                   device=None, **_ignored) -> None:
        """Compiles and caches the kernel that a call with these arguments would run, without
        running it (only the inputs' dtypes and ranks matter), so the first real call does not
        pay the compile. ``device`` as in a call; by default where the inputs live."""
        self._precompile(inputs, output_shapes, output_dtypes, grid, threadgroup, template, device)

    def generate(self, *, inputs, output_shapes, output_dtypes, template=None, **_ignored) -> str:
        """The Metal source MLX would compile for this call (``verbose=True`` prints it)."""
        return self._generate(inputs, output_shapes, output_dtypes, template)

    def translate(self, *, inputs, output_shapes, output_dtypes, template=None, target="cpu", **_ignored) -> str:
        """The source this call runs as on ``target``, without running it: ``"cpu"`` the C++ unit
        the CPU emulator compiles, ``"cuda"`` the CUDA that NVRTC compiles, ``"metal"`` what MLX
        would compile (as :meth:`generate`). The call's keywords as for a call; only the inputs'
        dtypes and ranks matter."""
        return self._translate(inputs, output_shapes, output_dtypes, template, target)

    def compile_cuda(self, *, inputs, output_shapes, output_dtypes, template=None, arch=(9, 0),
                     **_ignored) -> int:
        """Compiles this call's CUDA translation with NVRTC for compute capability ``arch``
        without running it (no GPU needed); returns the cubin's size in bytes."""
        op = f"metal_kernel {self.name}"
        if isinstance(arch, (str, bytes)) or not hasattr(arch, "__len__") or len(tuple(arch)) != 2:
            raise InvalidArgumentError(f"[{op}] arch must be (major, minor), got {arch!r}")
        arch = tuple(check_arg.count(op, "arch", v, 0, 100) for v in arch)
        return self._compile_cuda(inputs, output_shapes, output_dtypes, template, arch)

    def __repr__(self):
        return f"<kiln.MetalKernel {self.name!r}>"


def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                 atomic_outputs=False, compile_options=None) -> MetalKernel:
    """Defines a Metal kernel from its body, exactly as ``mx.fast.metal_kernel``.

    Build it once and call it many times with MLX's keyword arguments::

        kernel(inputs=[...], output_shapes=[...], output_dtypes=[...], grid=(x, y, z),
               threadgroup=(x, y, z), template=None, init_value=None, verbose=False,
               stream=None, device=None)

    The call returns a list of outputs of the lead input's kind on its device: NumPy arrays for
    NumPy inputs (run on the CPU emulator), PyTorch tensors for PyTorch tensors (CPU tensors on
    the emulator, CUDA tensors on their own GPU, queued on PyTorch's current stream of that
    device, or on ``stream``). ``device="cuda:N"`` copies NumPy inputs to that GPU, runs there
    and returns NumPy arrays. Scalars follow MLX: ``bool`` -> bool, ``int`` -> int32 (int64
    outside its range), ``float`` -> float32 0-d inputs; NumPy scalars keep their dtype.
    """
    return MetalKernel(name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                       compile_options)


class Output(NamedTuple):
    """A fresh output buffer of a :func:`metal_library` dispatch."""

    shape: tuple
    dtype: object
    init_value: float | None = None


class MetalLibrary:
    """A whole ``.metal`` file built by :func:`metal_library`."""

    __slots__ = ("_library", "name")

    def __init__(self, name, source, math_mode, include_dirs=(), defines=None, file_dir=None):
        op = f"metal_library {check_arg.text('metal_library', 'name', name)}"
        check_arg.text(op, "source", source)
        if math_mode not in _MATH_MODES:
            raise InvalidArgumentError(
                f"[metal_library {name}] expected math_mode 'safe', 'relaxed' or 'fast', got {math_mode!r}"
            )
        # Directories as str or path objects (`__fspath__`), as open() takes them.
        dirs = [] if isinstance(include_dirs, (str, bytes)) else list(include_dirs)
        if isinstance(include_dirs, (str, bytes)) or not all(isinstance(d, str) or hasattr(d, "__fspath__") for d in dirs):
            raise InvalidArgumentError(f"[{op}] include_dirs must be a list of directory paths, got {include_dirs!r}")
        self._library = _kiln.Library(name, source, math_mode, [d if isinstance(d, str) else d.__fspath__() for d in dirs],
                                      _macro_pairs(op, defines), file_dir)
        self.name = name

    def dispatch(self, function, buffers, *, threadgroup, threads=None, threadgroups=None,
                 threadgroup_memory=(), constants=None, device=None, stream=None, timeout=None):
        """Runs ``function``. ``buffers[i]`` is bound to ``[[buffer(i)]]``: an array (bound in
        place; the kernel may write it), ``bytes`` or a NumPy scalar / Python scalar (constant
        data), or :class:`Output` (a fresh output). Dispatch ``threads=(x, y, z)`` (exactly that
        many threads, as ``dispatchThreads``) or ``threadgroups=(x, y, z)`` (whole groups).
        ``threadgroup_memory[i]`` bytes are bound to ``[[threadgroup(i)]]``; ``constants`` maps
        function-constant indices or names to bool, int or float values; ``timeout`` stops a
        kernel on the CPU after that many seconds (:class:`kiln.TimeoutError`). Returns the
        fresh outputs in slot order, as the lead array's kind.

        An array bound to a buffer the function writes (a ``device`` pointer that is not
        ``const``) is updated in place: it must be writeable; a strided view, or a NumPy array of
        another byte order, is given to the kernel as a contiguous copy that is written back into
        exactly the view's elements when the kernel succeeds. On the CPU a write outside the
        array is a :class:`kiln.KernelFaultError` naming the buffer, and a faulting kernel leaves
        every array as it was."""
        if is_describing():
            fresh = [b for b in buffers if isinstance(b, Output)]
            arrays = [b for b in buffers if not isinstance(b, (Output, bytes, bytearray))]
            return empty_outputs(f"metal_library {self.name}", arrays, [b.shape for b in fresh],
                                 [b.dtype for b in fresh])
        if stream is not None:
            torch = _require_torch_for(stream)
            with torch.cuda.stream(stream if isinstance(stream, torch.cuda.Stream) else torch.cuda.ExternalStream(stream)):
                return self.dispatch(function, buffers, threadgroup=threadgroup, threads=threads,
                                     threadgroups=threadgroups, threadgroup_memory=threadgroup_memory,
                                     constants=constants, device=device, timeout=timeout)
        op = f"metal_library {self.name}:{function}"
        d = _Dispatch(self, op, function, buffers, threadgroup, threads, threadgroups, threadgroup_memory, constants,
                      device, timeout)
        on_torch_cuda = d.inputs.ordinal >= 0 and d.device is None
        slots, fresh = d.slots(on_torch_cuda)
        if on_torch_cuda:
            handle = _stream_handle(None, d.inputs.ordinal)
            with _DeviceGuard(d.inputs.ordinal):
                self._library.dispatch(function, slots, d.kind, d.size, d.threadgroup, d.memory, d.constants, None,
                                       (handle, d.inputs.ordinal), d.timeout)
            d.write_back()
            return fresh
        res = self._library.dispatch(function, slots, d.kind, d.size, d.threadgroup, d.memory, d.constants, d.device,
                                     None, d.timeout)
        d.write_back()
        out = []
        for h in res:
            if isinstance(h, _kiln.DeviceArray):
                h = h.to_host()
            out.append(host_output(h, d.inputs.lead))
        return out

    def _check(self, function, buffers, *, threadgroup, threads=None, threadgroups=None,
               threadgroup_memory=(), constants=None):
        op = f"metal_library {self.name}:{function}"
        d = _Dispatch(self, op, function, buffers, threadgroup, threads, threadgroups, threadgroup_memory, constants,
                      None, None)
        slots, _ = d.slots(False)
        found = self._library.check(function, slots, d.kind, d.size, d.threadgroup, d.memory, d.constants)
        return json.loads(found)

    def translate(self, function, *, target="cpu", constants=None) -> str:
        """The source ``function`` runs as on ``target`` (``"cpu"``, ``"cuda"`` or ``"metal"``)
        with these function ``constants``, without running it."""
        op = f"metal_library {self.name}:{function}"
        if not isinstance(function, str):
            raise InvalidArgumentError(f"[{op}] function must be a str, got {function!r}")
        return self._library.translate(function, _constants(op, constants), target)

    def __repr__(self):
        return f"<kiln.MetalLibrary {self.name!r}>"


_CONSTANT_DATA = (bytes, bytearray, bool, int, float, np.generic)


class _Dispatch:
    """One dispatch's arguments, checked: the launch geometry, and per buffer what is bound
    (arrays in place, contiguous copies of strided views to be written back, constant data,
    fresh outputs)."""

    def __init__(self, library, op, function, buffers, threadgroup, threads, threadgroups, threadgroup_memory,
                 constants, device, timeout):
        if not isinstance(function, str):
            raise InvalidArgumentError(f"[{op}] function must be a str, got {function!r}")
        if (threads is None) == (threadgroups is None):
            raise InvalidArgumentError(f"[{op}] give exactly one of threads= or threadgroups=")
        self.op = op
        self.kind, size = ("threads", threads) if threads is not None else ("threadgroups", threadgroups)
        self.size = check_arg.dims(op, self.kind, size)
        self.threadgroup = check_arg.dims(op, "threadgroup", threadgroup)
        self.memory = list(check_arg.shape(op, "threadgroup_memory", threadgroup_memory))
        self.constants = _constants(op, constants)
        self.device = check_arg.device(op, device)
        self.timeout = check_arg.timeout(op, timeout)
        buffers = check_arg.sequence(op, "buffers", buffers)
        writable = dict(library._library.writable_slots(function, self.constants))
        self.buffers = []
        # (the caller's array, the contiguous copy the kernel works on)
        self.copies = []
        arrays = []
        for slot, b in enumerate(buffers):
            if isinstance(b, Output):
                b = Output(check_arg.shape(op, f"buffers[{slot}].shape", b.shape),
                           check_arg.dtype(op, f"buffers[{slot}].dtype", b.dtype),
                           check_arg.init_value(op, b.init_value))
            elif isinstance(b, int) and not isinstance(b, bool):
                b = scalar(op, f"buffers[{slot}]", b)
            elif not isinstance(b, _CONSTANT_DATA):
                b = self._bound(slot, b, writable.get(slot))
                arrays.append(b)
            self.buffers.append(b)
        self.writable = writable
        self.inputs = _Inputs(arrays, False, op, [f"buffer {slot}" for slot, b in enumerate(self.buffers)
                                                  if not isinstance(b, (Output,) + _CONSTANT_DATA)])

    def _bound(self, slot, b, param):
        """What buffer ``slot`` binds for array ``b``: ``b`` itself, or a contiguous copy (of a
        strided view, another byte order) written back after the run where the kernel writes
        the slot (``param`` is the name of the parameter that writes it, else None)."""
        what = f"buffer {slot}" + (f" ({param})" if param else "")
        torch = torch_module()
        if torch is not None and isinstance(b, torch.Tensor):
            if b.is_contiguous():
                return b
            copy = b.contiguous()
            if param is not None:
                self.copies.append((b, copy))
            return copy
        if not isinstance(b, np.ndarray):
            if is_cuda_object(b):
                return b
            b = as_numpy(b)
        if param is not None and not b.flags.writeable:
            raise InvalidArgumentError(
                f"[{self.op}] {what} is a read-only array but the kernel writes it; pass a writeable array "
                "(or declare the parameter const)"
            )
        if b.flags.c_contiguous and b.dtype.isnative and b.flags.aligned:
            return b
        copy = np.ascontiguousarray(b, dtype=b.dtype.newbyteorder("="))
        if param is not None:
            self.copies.append((b, copy))
        return copy

    def slots(self, on_torch_cuda):
        """The extension's slot list, and the fresh outputs PyTorch allocated (on CUDA tensors)."""
        descs = iter(self.inputs.descs)
        slots, fresh = [], []
        for slot, b in enumerate(self.buffers):
            if isinstance(b, Output):
                if on_torch_cuda:
                    t = _kiln.torch_outputs(self.op, self.inputs.device, [(list(b.shape), b.dtype, b.init_value)])[0]
                    fresh.append(t)
                    slots.append(_kiln.lend(t))
                else:
                    slots.append(("output", b.shape, b.dtype, b.init_value))
            elif isinstance(b, (bytes, bytearray)):
                slots.append(bytes(b))
            elif isinstance(b, _CONSTANT_DATA):
                slots.append(_scalar_bytes(b))
            elif slot in self.writable:
                slots.append(("inplace", next(descs)))
            else:
                slots.append(next(descs))
        return slots, fresh

    def write_back(self):
        """Copies the kernel's results from contiguous copies into the views they stand for."""
        for view, copy in self.copies:
            if isinstance(view, np.ndarray):
                view[...] = copy
            else:
                view.copy_(copy)


def _constants(op, constants):
    if constants is None:
        return []
    if not isinstance(constants, dict):
        raise InvalidArgumentError(f"[{op}] constants must be a dict of index or name to value, got {constants!r}")
    out = []
    for key, value in constants.items():
        if not (isinstance(key, str) or (check_arg.integer(key) is not None and key >= 0)):
            raise InvalidArgumentError(f"[{op}] function constant key {key!r} is neither an index nor a name")
        if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
            raise InvalidArgumentError(f"[{op}] function constant {key!r} = {value!r} is not a bool, int or float")
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
                and not -(2**63) <= int(value) < 2**64:
            raise InvalidArgumentError(f"[{op}] function constant {key!r} = {value} does not fit 64 bits")
        out.append((key if isinstance(key, str) else int(key), value.item() if isinstance(value, np.generic) else value))
    return out


def _scalar_bytes(v) -> bytes:
    """A scalar as constant bytes, by MLX's rules for Python scalars."""
    if isinstance(v, np.generic):
        return v.tobytes()
    if isinstance(v, bool):
        return np.bool_(v).tobytes()
    if isinstance(v, int):
        return (np.int32(v) if -(2**31) <= v < 2**31 else np.int64(v)).tobytes()
    with np.errstate(over="ignore"):
        # MLX's rule: a float is a float32 (one beyond its range is infinite).
        return np.float32(v).tobytes()


def _macro_pairs(op, defines):
    """``defines`` ({name: value} or (name, value) pairs; a value None or True is 1) as
    (name, text) pairs."""
    if defines is None:
        return []
    items = defines.items() if isinstance(defines, dict) else defines
    pairs = []
    try:
        items = list(items)
    except TypeError:
        items = None
    if items is None or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in items):
        raise InvalidArgumentError(f"[{op}] defines must map macro names to values, got {defines!r}")
    for name, value in items:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidArgumentError(f"[{op}] defines: macro name {name!r} is not an identifier")
        if value is None or value is True:
            value = "1"
        elif value is False:
            value = "0"
        elif isinstance(value, (int, float)):
            value = repr(value)
        elif not isinstance(value, str) or "\n" in value or "\0" in value:
            raise InvalidArgumentError(f"[{op}] defines: the value of {name} must be one line of text or a number, got {value!r}")
        pairs.append((name, value))
    return pairs


def metal_library(name, source, math_mode="safe", include_dirs=(), defines=None) -> MetalLibrary:
    """A whole ``.metal`` file (mlx-native style): kernels with ``[[buffer(n)]]``,
    ``[[threadgroup(n)]]`` and builtin parameters, function constants and file-scope data.
    ``include_dirs`` are where the file's ``#include "x.h"`` and ``#include <x.h>`` find the
    library's own headers (a header found nowhere is a compile error naming the line);
    ``defines`` maps macro names to values for the whole source, as a library's build passes
    them (``{"GGML_METAL_HAS_BF16": 1}``). Run a function with :meth:`MetalLibrary.dispatch`."""
    return MetalLibrary(name, source, math_mode, include_dirs, defines)


def metal_library_file(path, math_mode="safe", include_dirs=(), defines=None) -> MetalLibrary:
    """The ``.metal`` file at ``path`` as a :func:`metal_library` named by its file name; its
    quoted ``#include`` lines are looked up beside it first, then in ``include_dirs``."""
    import os

    if not (isinstance(path, str) or hasattr(path, "__fspath__")):
        raise InvalidArgumentError(f"[metal_library_file] path must be a file path, got {path!r}")
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"[metal_library_file] cannot read {path}: {e}") from None
    directory = os.path.dirname(os.path.abspath(path))
    return MetalLibrary(os.path.basename(path), source, math_mode, include_dirs, defines, directory)
