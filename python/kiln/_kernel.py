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
    NUMPY,
    TORCH,
    as_numpy,
    from_cuda_object,
    host_output,
    is_cuda_object,
    numpy_desc,
    torch_desc,
    torch_module,
    torch_outputs,
)
from ._abstract import empty_outputs, is_describing
from ._dtypes import dtype_name
from .errors import InvalidArgumentError

_MATH_MODES = ("safe", "relaxed", "fast")


def _math_mode(compile_options) -> str:
    if compile_options is None:
        return "safe"
    if not isinstance(compile_options, dict):
        raise InvalidArgumentError("[metal_kernel] expected compile_options to be a dict")
    for key in compile_options:
        if key != "math_mode":
            raise InvalidArgumentError(f"[metal_kernel] unknown compile option {key!r}")
    mode = compile_options.get("math_mode", "safe")
    if mode not in _MATH_MODES:
        raise InvalidArgumentError(
            f"[metal_kernel] expected math_mode 'safe', 'relaxed' or 'fast', got {mode!r}"
        )
    return mode


class _Inputs:
    """The descriptors of a call's inputs and the framework / device of its lead array."""

    __slots__ = ("descs", "lead", "ordinal", "device")

    def __init__(self, inputs, ensure_row_contiguous: bool):
        descs = []
        lead = None
        ordinal = -1
        device = None
        torch = torch_module()
        for x in inputs:
            t = type(x)
            if t is float or t is int or t is bool:
                descs.append(x)
                continue
            if t is np.ndarray:
                descs.append(numpy_desc(x))
                if lead is None and x.ndim > 0:
                    lead = NUMPY
                continue
            if torch is not None and isinstance(x, torch.Tensor):
                descs.append(self._torch(x, ensure_row_contiguous))
                if lead is None and x.dim() > 0:
                    lead, ordinal, device = TORCH, descs[-1][7], x.device
                continue
            if isinstance(x, np.generic):
                # NumPy scalars keep their dtype (np.float64 is also a Python float).
                descs.append(numpy_desc(np.asarray(x)))
                continue
            if isinstance(x, (bool, int, float)):
                descs.append(bool(x) if isinstance(x, bool) else int(x) if isinstance(x, int) else float(x))
                continue
            if is_cuda_object(x):
                x = from_cuda_object(x)
                torch = torch_module()
                descs.append(self._torch(x, ensure_row_contiguous))
                if lead is None and x.dim() > 0:
                    lead, ordinal, device = TORCH, descs[-1][7], x.device
                continue
            a = as_numpy(x)
            descs.append(numpy_desc(a))
            if lead is None and a.ndim > 0:
                lead = NUMPY
        self.descs, self.lead, self.ordinal, self.device = descs, lead, ordinal, device

    @staticmethod
    def _torch(x, ensure_row_contiguous):
        ordinal = x.get_device()
        if ordinal < 0 and x.device.type != "cpu":
            raise InvalidArgumentError(f"[kiln] tensors on {x.device} are not supported (cpu or cuda)")
        if ordinal >= 0 and ensure_row_contiguous and not x.is_contiguous():
            # MLX copies such inputs too; PyTorch's copy runs on the current stream, in order.
            x = x.contiguous()
        return torch_desc(x.detach() if x.requires_grad else x, ordinal)


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
                   verbose=False, stream=None, device=None):
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
    init_value=None, verbose=False, stream=None, device=None)`` returns the outputs, one per output
    name.

    ``inputs`` are arrays (NumPy, PyTorch, DLPack or CUDA-array-interface objects) or Python
    scalars; ``grid`` counts threads; ``template`` is an ordered list of ``(name, value)`` with
    bool, int or dtype values; ``init_value`` fills every output first; ``verbose`` prints the
    generated Metal source. ``stream`` (a ``torch.cuda.Stream`` or a raw ``CUstream``) queues a
    CUDA launch there instead of on PyTorch's current stream; ``device="cuda:N"`` copies NumPy
    inputs to that GPU and returns NumPy outputs.

    The call itself is kiln's extension (``_kiln.MetalKernel.__call__``): PyTorch CUDA tensors on the
    current device and stream are launched there in one step; every other call comes to
    :meth:`_call_general`.
    """

    __slots__ = ("_ensure_row_contiguous", "name", "input_names", "output_names")
    __signature__ = _CallSignature()

    def __new__(cls, name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                compile_options):
        if len(output_names) == 0:
            raise InvalidArgumentError(f"[metal_kernel {name}] must specify at least one output")
        return super().__new__(
            cls, name, list(input_names), list(output_names), source, header, bool(ensure_row_contiguous),
            bool(atomic_outputs), _math_mode(compile_options),
        )

    def __init__(self, name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                 compile_options):
        self._ensure_row_contiguous = bool(ensure_row_contiguous)
        self.name = name
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def _call_general(self, inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, verbose,
                      stream, device):
        if is_describing():
            return empty_outputs(f"metal_kernel {self.name}", inputs, output_shapes, output_dtypes)
        if stream is not None and not isinstance(stream, (str, bytes)):
            # PyTorch allocates the outputs (and any input copy) on that stream too, so its
            # caching allocator orders their reuse after the kernel.
            torch = _require_torch_for(stream)
            with torch.cuda.stream(stream if isinstance(stream, torch.cuda.Stream) else torch.cuda.ExternalStream(stream)):
                return self(inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes, grid=grid,
                            threadgroup=threadgroup, template=template, init_value=init_value, verbose=verbose,
                            device=device)
        ins = _Inputs(inputs, self._ensure_row_contiguous)
        shapes = [tuple(s) for s in output_shapes]
        dtypes = [dtype_name(d) for d in output_dtypes]
        tmpl = _template(template)
        init = None if init_value is None else float(init_value)
        if ins.ordinal >= 0 and device is not None and str(device) != f"cuda:{ins.ordinal}":
            raise InvalidArgumentError(
                f"[metal_kernel {self.name}] the inputs live on cuda:{ins.ordinal}, not on {device}; move them with torch"
            )
        if ins.ordinal >= 0:
            if len(shapes) != len(dtypes):
                # Let kiln report the count mismatch in MLX's words.
                outs, descs = None, None
            else:
                outs = torch_outputs(shapes, dtypes, ins.device, init)
                descs = [torch_desc(o, ins.ordinal) for o in outs]
            ordinal = ins.ordinal
            args = (ins.descs, shapes, dtypes, tuple(grid), tuple(threadgroup), tmpl, init, bool(verbose), None,
                    (_stream_handle(None, ordinal), ordinal), descs)
            if _current_device() == ordinal:
                self._launch(*args)
            else:
                with torch_module().cuda.device(ordinal):
                    self._launch(*args)
            return outs
        device = None if device is None else str(device)
        res = self._launch(ins.descs, shapes, dtypes, tuple(grid), tuple(threadgroup), tmpl, init, bool(verbose),
                           device, None, None)
        lead = ins.lead
        out = []
        for h in res:
            if isinstance(h, _kiln.DeviceArray):
                h = h.to_host()
            out.append(host_output(h, lead))
        return out

    def _check(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, init_value=None,
               **_ignored):
        ins = _Inputs(inputs, self._ensure_row_contiguous)
        if ins.ordinal >= 0:
            raise InvalidArgumentError(
                f"[metal_kernel {self.name}] kiln.check runs on the CPU emulator; pass host arrays (NumPy)"
            )
        text = self._check_json(ins.descs, [tuple(s) for s in output_shapes],
                                [dtype_name(d) for d in output_dtypes], tuple(grid), tuple(threadgroup),
                                _template(template), None if init_value is None else float(init_value))
        return json.loads(text)

    def precompile(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
                   device=None, **_ignored) -> None:
        """Compiles and caches the kernel that a call with these arguments would run, without
        running it (only the inputs' dtypes and ranks matter), so the first real call does not
        pay the compile. ``device`` as in a call; by default where the inputs live."""
        ins = _Inputs(inputs, self._ensure_row_contiguous)
        if ins.ordinal >= 0 and device is None:
            device = f"cuda:{ins.ordinal}"
        self._precompile(ins.descs, [tuple(s) for s in output_shapes],
                         [dtype_name(d) for d in output_dtypes], tuple(grid), tuple(threadgroup),
                         _template(template), None if device is None else str(device))

    def generate(self, *, inputs, output_shapes, output_dtypes, template=None, **_ignored) -> str:
        """The Metal source MLX would compile for this call (``verbose=True`` prints it)."""
        ins = _Inputs(inputs, self._ensure_row_contiguous)
        return self._generate(ins.descs, [tuple(s) for s in output_shapes],
                              [dtype_name(d) for d in output_dtypes], _template(template))

    def compile_cuda(self, *, inputs, output_shapes, output_dtypes, template=None, arch=(9, 0),
                     **_ignored) -> int:
        """Compiles this call's CUDA translation with NVRTC for compute capability ``arch``
        without running it (no GPU needed); returns the cubin's size in bytes."""
        ins = _Inputs(inputs, self._ensure_row_contiguous)
        return self._compile_cuda(ins.descs, [tuple(s) for s in output_shapes],
                                  [dtype_name(d) for d in output_dtypes], _template(template),
                                  tuple(arch))

    def __repr__(self):
        return f"<kiln.MetalKernel {self.name!r}>"


def _template(template):
    if not template:
        return []
    out = []
    for name, value in template:
        t = type(value)
        if t is bool or t is int:
            out.append((name, value))
        elif isinstance(value, (bool, int, np.integer)) and not isinstance(value, np.bool_):
            out.append((name, int(value)))
        elif isinstance(value, np.bool_):
            out.append((name, bool(value)))
        else:
            try:
                out.append((name, dtype_name(value)))
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    "[metal_kernel] invalid template argument; must be Dtype, int or bool"
                ) from None
    return out


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

    def __init__(self, name, source, math_mode):
        if math_mode not in _MATH_MODES:
            raise InvalidArgumentError(
                f"[metal_library {name}] expected math_mode 'safe', 'relaxed' or 'fast', got {math_mode!r}"
            )
        self._library = _kiln.Library(name, source, math_mode)
        self.name = name

    def dispatch(self, function, buffers, *, threadgroup, threads=None, threadgroups=None,
                 threadgroup_memory=(), constants=None, device=None, stream=None):
        """Runs ``function``. ``buffers[i]`` is bound to ``[[buffer(i)]]``: an array (bound in
        place; the kernel may write it), ``bytes`` or a NumPy scalar / Python scalar (constant
        data), or :class:`Output` (a fresh output). Dispatch ``threads=(x, y, z)`` (exactly that
        many threads, as ``dispatchThreads``) or ``threadgroups=(x, y, z)`` (whole groups).
        ``threadgroup_memory[i]`` bytes are bound to ``[[threadgroup(i)]]``; ``constants`` maps
        function-constant indices or names to bool, int or float values. Returns the fresh
        outputs in slot order, as the lead array's kind."""
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
                                     constants=constants, device=device)
        if (threads is None) == (threadgroups is None):
            raise InvalidArgumentError(f"[metal_library {self.name}] give exactly one of threads= or threadgroups=")
        kind, size = ("threads", threads) if threads is not None else ("threadgroups", threadgroups)
        arrays = [b for b in buffers if not isinstance(b, (Output, bytes, bytearray, bool, int, float, np.generic))]
        ins = _Inputs(arrays, False)
        descs = iter(ins.descs)
        slots = []
        fresh = []
        on_torch_cuda = ins.ordinal >= 0 and device is None
        for b in buffers:
            if isinstance(b, Output):
                name = dtype_name(b.dtype)
                if on_torch_cuda:
                    t = torch_outputs([tuple(b.shape)], [name], ins.device, b.init_value)[0]
                    fresh.append(t)
                    slots.append(torch_desc(t, ins.ordinal))
                else:
                    slots.append(("output", tuple(b.shape), name,
                                  None if b.init_value is None else float(b.init_value)))
            elif isinstance(b, (bytes, bytearray)):
                slots.append(bytes(b))
            elif isinstance(b, (bool, int, float, np.generic)):
                slots.append(_scalar_bytes(b))
            else:
                slots.append(next(descs))
        consts = list((constants or {}).items())
        tm = [int(n) for n in threadgroup_memory]
        if on_torch_cuda:
            handle = _stream_handle(None, ins.ordinal)
            with _DeviceGuard(ins.ordinal):
                self._library.dispatch(function, slots, kind, tuple(size), tuple(threadgroup), tm, consts, None,
                                       (handle, ins.ordinal))
            return fresh
        res = self._library.dispatch(function, slots, kind, tuple(size), tuple(threadgroup), tm, consts,
                                     None if device is None else str(device), None)
        out = []
        for h in res:
            if isinstance(h, _kiln.DeviceArray):
                h = h.to_host()
            out.append(host_output(h, ins.lead))
        return out

    def _check(self, function, buffers, *, threadgroup, threads=None, threadgroups=None,
               threadgroup_memory=(), constants=None):
        if (threads is None) == (threadgroups is None):
            raise InvalidArgumentError(f"[metal_library {self.name}] give exactly one of threads= or threadgroups=")
        kind, size = ("threads", threads) if threads is not None else ("threadgroups", threadgroups)
        arrays = [b for b in buffers if not isinstance(b, (Output, bytes, bytearray, bool, int, float, np.generic))]
        descs = iter(_Inputs(arrays, False).descs)
        slots = []
        for b in buffers:
            if isinstance(b, Output):
                slots.append(("output", tuple(b.shape), dtype_name(b.dtype),
                              None if b.init_value is None else float(b.init_value)))
            elif isinstance(b, (bytes, bytearray)):
                slots.append(bytes(b))
            elif isinstance(b, (bool, int, float, np.generic)):
                slots.append(_scalar_bytes(b))
            else:
                slots.append(next(descs))
        consts = list((constants or {}).items())
        found = self._library.check(function, slots, kind, tuple(size), tuple(threadgroup),
                                    [int(n) for n in threadgroup_memory], consts)
        return json.loads(found)

    def __repr__(self):
        return f"<kiln.MetalLibrary {self.name!r}>"


def _scalar_bytes(v) -> bytes:
    """A scalar as constant bytes, by MLX's rules for Python scalars."""
    if isinstance(v, np.generic):
        return v.tobytes()
    if isinstance(v, bool):
        return np.bool_(v).tobytes()
    if isinstance(v, int):
        return (np.int32(v) if -(2**31) <= v < 2**31 else np.int64(v)).tobytes()
    return np.float32(v).tobytes()


def metal_library(name, source, math_mode="safe") -> MetalLibrary:
    """A whole ``.metal`` file (mlx-native style): kernels with ``[[buffer(n)]]``,
    ``[[threadgroup(n)]]`` and builtin parameters, function constants and file-scope data.
    Run a function with :meth:`MetalLibrary.dispatch`."""
    return MetalLibrary(name, source, math_mode)


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
    from ._check import unwrap

    kernel, call_keywords = unwrap(kernel, call_keywords)
    if isinstance(kernel, MetalLibrary):
        return kernel._check(**call_keywords)
    if not isinstance(kernel, MetalKernel):
        raise InvalidArgumentError(
            f"kiln.check takes a kernel from kiln.metal_kernel or kiln.metal_library, not {type(kernel).__name__}"
        )
    return kernel._check(**call_keywords)
