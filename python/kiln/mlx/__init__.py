"""``mx.fast.metal_kernel`` where MLX has no Metal back-end: MLX's CPU build (Linux) and its
CUDA build.

>>> import kiln.mlx
>>> kiln.mlx.install()      # before the code that builds kernels is imported
>>> import mlx.core as mx   # mx.fast.metal_kernel(...) now runs its kernels with kiln

After :func:`install`, ``mx.fast.metal_kernel`` is kiln's factory with MLX's arguments.

On MLX's CUDA build a kernel is an ordinary lazy MLX primitive, as ``metal_kernel`` is on a
Mac: each call signature builds an ``mx.fast.cuda_kernel`` from kiln's CUDA lowering of the
Metal kernel (header: kiln's prelude, the lowered kernel and an entry shim that gives the Metal
attributes exactly, partial threadgroups included; body: one call of the shim), and a call
returns MLX's lazy outputs on MLX's stream. It works inside ``mx.compile``,
``mx.custom_function`` (``@f.vjp``), ``mx.grad`` and wherever MLX's own custom kernels work.
What ``cuda_kernel`` cannot run (a grid beyond one CUDA launch) runs eagerly, with one
:class:`EagerKernelWarning` naming why.

On MLX's CPU build (and under :func:`use_device`) a call runs the kernel with kiln eagerly on
the device the arrays live on (the CPU emulator for MLX CPU arrays) and returns MLX arrays.
Inputs are read in place by the extension (as NumPy reads them; bfloat16 through DLPack);
kiln's outputs are copied once into new MLX arrays, which costs less than kiln writing evaluated
MLX allocations in place (MLX's evaluation, and a guarded copy in and out of memory kiln did not
allocate). Calls with ``init_value`` take the in-place path. The call evaluates its inputs and its outputs
are already evaluated, so it works inside ``mx.grad`` / ``mx.vjp`` / ``mx.custom_function``
but not inside ``mx.compile`` or ``mx.vmap``, which forbid evaluation.

``verbose=True`` prints the Metal source MLX would generate on a Mac; ``verbose="cuda"`` also
has MLX print the CUDA source it compiles (kiln's header and body inside MLX's wrapper).

``mx.metal.is_available()`` reports True while installed (``metal_available=False`` keeps
MLX's answer), because packages build their kernels only when it does (mlx-lm's
``if not mx.metal.is_available(): return None``).

For code you do not control: ``python -m kiln.mlx script.py [args]`` (or ``-m module``) runs it
with the drop-in installed; or put the directory printed by ``python -m kiln.mlx --site`` on
``PYTHONPATH`` and set ``KILN_MLX=1``: every Python process started so installs the drop-in when
it first imports ``mlx.core``.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys

from .._kernel import MetalKernel as _KilnKernel
from .. import _kiln
from .. import _validate as check_arg
from ..errors import InvalidArgumentError
from . import _lazy
from ._dlpack import CPU, describe_dlpack, device_kind, libcuda, mlx_has_cuda
from ._lazy import EagerKernelWarning

__all__ = ["install", "uninstall", "installed", "metal_kernel", "MetalKernel", "use_device", "EagerKernelWarning"]

# What install() replaced, to put back: {"metal_kernel": f, "is_available": f}, and the
# cuda_kernel factory it chose ("cuda_kernel": f, or None for eager kernels).
_saved: dict = {}
# A device to run kernels on instead of the arrays' own ("cuda:0" for MLX CPU arrays on a GPU).
_device_override: contextvars.ContextVar = contextvars.ContextVar("kiln_mlx_device", default=None)


def _mx():
    mx = _mlx_core.get("mx")
    if mx is None:
        import mlx.core as mx

        _mlx_core["mx"] = mx
    return mx


_mlx_core: dict = {}


def installed() -> bool:
    """Whether :func:`install` has replaced ``mx.fast.metal_kernel``."""
    return bool(_saved)


def install(*, metal_available: bool = True, force: bool = False, lazy: bool = True, cuda_kernel=None) -> bool:
    """Makes ``mx.fast.metal_kernel`` build kiln kernels (see the module's documentation).

    Does nothing (returns False) where MLX has its own Metal back-end, unless ``force``.
    ``metal_available`` makes ``mx.metal.is_available()`` report True while installed.
    ``lazy=False`` runs every kernel eagerly, even on MLX's CUDA build. ``cuda_kernel`` is the
    factory lazy kernels are built with (``mx.fast.cuda_kernel``'s arguments) instead of MLX's
    on its CUDA build; giving one makes kernels lazy on any build (tests give a stand-in).
    Modules that copied the factory (``from mlx.core.fast import metal_kernel``) before
    ``install`` keep MLX's: install first. Returns whether the drop-in is installed."""
    mx = _mx()
    if _saved:
        return True
    real_metal = mx.metal.is_available()
    if real_metal and not force:
        return False
    _saved["cuda_kernel"] = cuda_kernel if cuda_kernel is not None else (_DETECT if lazy else None)
    _saved["metal_kernel"] = mx.fast.metal_kernel
    _saved["is_available"] = mx.metal.is_available
    mx.fast.metal_kernel = metal_kernel
    if metal_available and not real_metal:
        mx.metal.is_available = _metal_is_available
    return True


def uninstall() -> None:
    """Puts MLX's ``mx.fast.metal_kernel`` and ``mx.metal.is_available`` back. Kernels built
    while installed keep running on kiln."""
    if not _saved:
        return
    mx = _mx()
    mx.fast.metal_kernel = _saved.pop("metal_kernel")
    mx.metal.is_available = _saved.pop("is_available")
    _saved.clear()


# install()'s default choice of factory: MLX's own cuda_kernel where MLX runs on CUDA.
_DETECT = object()
_detected: dict = {}


def _cuda_kernel_factory():
    """The factory lazy kernels are built with, or None where kernels run eagerly."""
    choice = _saved.get("cuda_kernel", _DETECT)
    if choice is _DETECT:
        if "mlx" not in _detected:
            mx = _mx()
            _detected["mlx"] = mx.fast.cuda_kernel if mlx_has_cuda() and hasattr(mx.fast, "cuda_kernel") else None
        return _detected["mlx"]
    return choice


def _metal_is_available() -> bool:
    """``mx.metal.is_available`` while the drop-in is installed: kernels run (on kiln)."""
    return True


@contextlib.contextmanager
def use_device(device):
    """Runs the kernels called on MLX CPU arrays inside on kiln's ``device`` (``"cuda:N"``, or
    ``"cpu"``) with kiln's own buffers: the inputs are copied there and the outputs back into
    new MLX arrays (the CUDA variant of a test on MLX's CPU build). ``None``: in place, on the
    arrays' own device."""
    token = _device_override.set(None if device is None else str(device))
    try:
        yield
    finally:
        _device_override.reset(token)


class MetalKernel:
    """A kernel built by the drop-in ``mx.fast.metal_kernel``: MLX's call keywords, MLX arrays
    in and out, run by kiln."""

    __slots__ = ("_kiln", "name", "_n_outputs", "_factory_args", "_mlx_kernel", "_plans", "_warned")

    def __init__(self, name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                 atomic_outputs=False, compile_options=None):
        self._kiln = _KilnKernel(name, input_names, output_names, source, header, ensure_row_contiguous,
                                 atomic_outputs, compile_options)
        self.name = name
        self._n_outputs = len(output_names)
        self._factory_args = dict(name=name, input_names=input_names, output_names=output_names, source=source,
                                  header=header, ensure_row_contiguous=ensure_row_contiguous,
                                  atomic_outputs=atomic_outputs, compile_options=compile_options)
        self._mlx_kernel = None
        # The cuda_kernel of each call signature seen (or why it runs eagerly), on MLX's CUDA build.
        self._plans = {}
        # The reasons this kernel ran eagerly that were warned about (once each).
        self._warned = set()

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
                 init_value=None, verbose=False, stream=None):
        """Returns the kernel's outputs as MLX arrays: lazy ones from MLX's ``cuda_kernel`` on
        MLX's CUDA build, else evaluated ones kiln has written (``stream`` is then accepted for
        MLX's signature; kiln runs on the arrays' device)."""
        override = _device_override.get()
        host = _host_types() if override is None and init_value is None and not verbose else None
        # MLX's CPU build: kiln's call on the arrays' memory, the outputs copied into new MLX
        # arrays (the extension's `_mlx_host_call`); None where the general path takes the call.
        if host is not None:
            outs = self._kiln._mlx_host_call(inputs, output_shapes, output_dtypes, grid, threadgroup, template, *host)
            if outs is not None:
                return outs
        mx = _mx()
        # MLX converts array-likes (NumPy arrays, lists) to MLX arrays; Python scalars stay
        # scalars, which kiln types by MLX's rules.
        array = mx.array
        given = inputs
        inputs = [x if type(x) is array or isinstance(x, (array, bool, int, float)) else array(x) for x in given]
        if host is not None and any(x is not y for x, y in zip(inputs, given)):
            outs = self._kiln._mlx_host_call(inputs, output_shapes, output_dtypes, grid, threadgroup, template, *host)
            if outs is not None:
                return outs
        factory = _cuda_kernel_factory()
        if factory is not None and override is None:
            outs = _lazy.call(self, factory, mx, inputs, output_shapes, output_dtypes, grid, threadgroup, template,
                              init_value, verbose, stream)
            if outs is not None:
                return outs
        arrays = [x for x in inputs if isinstance(x, mx.array)]
        op = f"metal_kernel {self.name}"
        shapes = check_arg.shapes(op, output_shapes)
        dtypes = check_arg.dtypes(op, output_dtypes)
        tmpl = check_arg.template(op, template)
        init = check_arg.init_value(op, init_value)
        grid, threadgroup = check_arg.dims(op, "grid", grid), check_arg.dims(op, "threadgroup", threadgroup)
        lead = next((x for x in arrays if x.ndim > 0), arrays[0] if arrays else None)
        on_cpu = lead is None or device_kind(lead) == CPU
        if override == "cpu" and not on_cpu:
            raise InvalidArgumentError(
                f"[metal_kernel {self.name}] the inputs live on the GPU; kiln.mlx.use_device('cpu') applies to "
                "MLX CPU arrays only")
        moved = override is not None and on_cpu
        counts_match = len(shapes) == len(dtypes) == self._n_outputs
        # Outputs are MLX's, for kiln to write in place; evaluated with the inputs in one go.
        outs = [_fresh(mx, s, d, init) for s, d in zip(shapes, dtypes)] if counts_match and not moved else []
        if not _evaluate(mx, arrays + outs):
            # Under a transformation that forbids evaluation (mx.export_function records MLX's
            # own kernel for a Mac even without Metal; mx.compile / mx.vmap cannot run it).
            return self._traced(mx, dict(inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes,
                                         grid=grid, threadgroup=threadgroup, template=template,
                                         init_value=init_value, verbose=verbose, stream=stream))
        host = override == "cpu"
        descs = [describe_dlpack(x, host) if isinstance(x, mx.array) else x for x in inputs]
        if moved:
            return self._run_on(override, descs, shapes, dtypes, grid, threadgroup, tmpl, init, verbose)
        if not counts_match:
            # kiln reports the count mismatch in MLX's words.
            self._kiln._launch(descs, shapes, dtypes, grid, threadgroup, tmpl, init, bool(verbose), None,
                               None, None)
        out_descs = [describe_dlpack(o, host) for o in outs]
        # Where kiln runs it: the GPU of the arrays' memory (device memory, or the CUDA managed
        # memory of MLX's CUDA build), else the CPU emulator.
        ordinals = [d.ordinal for d in descs + out_descs if isinstance(d, _kiln.LentArray) and d.ordinal >= 0]
        if not ordinals:
            self._kiln._launch(descs, shapes, dtypes, grid, threadgroup, tmpl, None, bool(verbose), None, None,
                               out_descs)
            return outs
        # MLX's CUDA build: MLX's stream is not exposed, so its pending work is finished first
        # and kiln's launch on the legacy default stream is waited for.
        ordinal = ordinals[0]
        mx.synchronize()
        self._kiln._launch(descs, shapes, dtypes, grid, threadgroup, tmpl, None, bool(verbose), None,
                           (0, ordinal), out_descs)
        _cuda_synchronize_default_stream()
        return outs

    def _traced(self, mx, call):
        factory = _saved.get("metal_kernel", mx.fast.metal_kernel)
        try:
            if self._mlx_kernel is None:
                self._mlx_kernel = factory(**self._factory_args)
            return self._mlx_kernel(**call)
        except (RuntimeError, ValueError):
            raise InvalidArgumentError(
                f"[metal_kernel {self.name}] kiln runs MLX kernels eagerly, which mx.compile and mx.vmap do not "
                "allow; call the kernel outside them (mx.disable_compile() turns mx.compile off)"
            ) from None

    def _run_on(self, device, descs, shapes, dtypes, grid, threadgroup, tmpl, init, verbose):
        """MLX CPU arrays run on ``device``: kiln copies the inputs there and the outputs back."""
        from .. import _kiln
        from .._arrays import host_output

        mx = _mx()
        res = self._kiln._launch(descs, shapes, dtypes, grid, threadgroup, tmpl, init, bool(verbose),
                                 device, None, None)
        out = []
        for h in res:
            if isinstance(h, _kiln.DeviceArray):
                h = h.to_host()
            a = host_output(h, "numpy")
            if h.dtype == "bfloat16":
                out.append(mx.array(a.view("uint16")).view(mx.bfloat16))
            else:
                out.append(mx.array(a))
        return out

    def cuda_kernel_source(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None):
        """What a call with these arguments gives ``mx.fast.cuda_kernel`` (``name``,
        ``input_names``, ``output_names``, ``source``, ``header``, ``ensure_row_contiguous``,
        ``shared_memory``, ``grid_input``), or ``{"unsupported": reason}``. Inputs may be lazy
        MLX arrays, Python scalars, or ``(dtype, shape)`` pairs; only their dtypes and shapes
        are read."""
        mx = _mx()
        op = f"metal_kernel {self.name}"
        kinds = [x if isinstance(x, tuple) else _lazy._kinds(mx, [x])[0] for x in inputs]
        kinds = [(check_arg.dtype(op, "inputs", d), tuple(s)) for d, s in kinds]
        return _kiln.mlx_cuda_kernel_source(self._kiln, kinds, check_arg.shapes(op, output_shapes),
                                            check_arg.dtypes(op, output_dtypes), check_arg.dims(op, "grid", grid),
                                            check_arg.dims(op, "threadgroup", threadgroup),
                                            check_arg.template(op, template))

    def __repr__(self):
        return f"<kiln.mlx.MetalKernel {self.name!r}>"


def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                 atomic_outputs=False, compile_options=None) -> MetalKernel:
    """``mx.fast.metal_kernel`` run by kiln: the same arguments; building it compiles nothing
    (the first call does), so kernels built at import time never fail for lack of Metal."""
    return MetalKernel(name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                       compile_options)


def _host_types():
    """``(mx.array, mx.bfloat16)`` where kernels on MLX arrays run eagerly on kiln's CPU emulator
    (MLX's CPU build, no ``cuda_kernel`` factory chosen), else None; decided once per choice of
    factory."""
    choice = _saved.get("cuda_kernel", _DETECT)
    seen = _detected.get("host")
    if seen is not None and seen[0] is choice:
        return seen[1]
    mx = _mx()
    types = (mx.array, mx.bfloat16) if _cuda_kernel_factory() is None and not mlx_has_cuda() else None
    _detected["host"] = (choice, types)
    return types


def _evaluate(mx, arrays) -> bool:
    """Evaluates ``arrays``; False where a transformation being traced forbids evaluation."""
    try:
        mx.eval(*arrays)
    except ValueError as e:
        if "function transformations" not in str(e):
            raise
        return False
    return True


def _fresh(mx, shape, dtype, init):
    """A new evaluated, row-contiguous MLX array for kiln to write in place (``init`` first)."""
    dtype = getattr(mx, "bool_" if dtype == "bool" else dtype)
    if init is None:
        return mx.zeros(shape, dtype=dtype)
    # MLX's cast of init_value: a float truncates to an int dtype, non-zero is True.
    return mx.full(shape, mx.array(init, dtype=mx.float32).astype(dtype))


def _cuda_synchronize_default_stream() -> None:
    import ctypes

    lib = libcuda()
    if lib is None:
        raise RuntimeError("[kiln.mlx] the CUDA driver (libcuda.so.1) cannot be loaded")
    rc = lib.cuStreamSynchronize(ctypes.c_void_p(0))
    if rc != 0:
        raise RuntimeError(f"[kiln.mlx] cuStreamSynchronize failed with CUDA error {rc}")


def _install_from_environment() -> None:
    """``KILN_MLX=1``: install when ``mlx.core`` is first imported (the ``--site`` hook)."""
    import os

    if os.environ.get("KILN_MLX", "") not in ("1", "true", "yes"):
        return
    if "mlx.core" in sys.modules:
        install()
        return
    from ._hook import install_on_import

    install_on_import()
