"""A stand-in for MLX's ``mx.fast.cuda_kernel`` (MLX's CPU wheel has no CUDA back-end) and a
recorder that compiles every kernel call of a test in the form the MLX drop-in hands to
``cuda_kernel`` on MLX's CUDA build.

Both go through kiln's own ``CudaKernel`` (``kiln._kiln.CudaKernel``), which reproduces MLX's
wrapper around a ``cuda_kernel`` body and header: the recorder compiles with NVRTC for sm_90
(no GPU needed), the stand-in records its arguments and, where asked and a GPU is present, runs
the kernel on it."""

from __future__ import annotations

import contextlib
import os

import ml_dtypes
import numpy as np

import kiln
from kiln import _kiln
from kiln import _validate as check_arg
from kiln._arrays import as_numpy, host_output
from kiln._dtypes import dtype_name

ARCH = (9, 0)


def nvrtc_available() -> bool:
    """Whether NVRTC loads here; a failure where the run requires NVRTC (CI) or CUDA."""
    try:
        kiln.nvrtc_version()
        return True
    except kiln.BackendUnavailableError as e:
        if os.environ.get("KILN_REQUIRE_BACKEND") in ("nvrtc", "cuda"):
            raise AssertionError(f"NVRTC is required for this run: {e}") from None
        return False


def mlx_compiles_cuda_kernels() -> bool:
    """Whether MLX here is its CUDA build on a GPU, where ``mx.fast.cuda_kernel`` is MLX's own."""
    try:
        import mlx.core as mx
    except ImportError:
        return False
    return bool(getattr(getattr(mx, "cuda", None), "is_available", lambda: False)())


def kiln_template(template):
    """A template list as kiln's extension takes it (dtype values by name)."""
    return check_arg.template("cuda_kernel", template)


def to_numpy(x):
    """An MLX array's values as NumPy (bfloat16 through its bits)."""
    import mlx.core as mx

    if x.dtype == mx.bfloat16:
        return np.asarray(x.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.asarray(x)


def to_mlx(a):
    import mlx.core as mx

    if a.dtype == ml_dtypes.bfloat16:
        return mx.array(a.view(np.uint16)).view(mx.bfloat16)
    return mx.array(a)


def kind(x):
    """An input's (dtype name, shape): arrays of any framework kiln takes, or Python scalars."""
    if isinstance(x, bool):
        return ("bool", ())
    if isinstance(x, int):
        return ("int32" if -(2**31) <= x < 2**31 else "int64", ())
    if isinstance(x, float):
        return ("float32", ())
    if not hasattr(x, "dtype"):
        x = as_numpy(x)  # lists, by MLX's rules
    return (dtype_name(x.dtype), tuple(x.shape))


class StandIn:
    """``mx.fast.cuda_kernel``'s stand-in. ``built`` holds each factory call's arguments and
    ``calls`` each kernel call's. A call returns zeros of the output shapes (lazy MLX arrays),
    or with ``run`` the outputs of the kernel run through kiln's ``CudaKernel`` on ``device``
    (its inputs evaluated first, so not inside ``mx.compile``)."""

    def __init__(self, run: bool = False, device: str = "cuda:0"):
        self.built, self.calls, self.run, self.device = [], [], run, device

    def __call__(self, name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                 shared_memory=0):
        factory = dict(name=name, input_names=list(input_names), output_names=list(output_names), source=source,
                       header=header, ensure_row_contiguous=ensure_row_contiguous, shared_memory=shared_memory)
        self.built.append(factory)
        cuda = _kiln.CudaKernel(name, list(input_names), list(output_names), source, header, ensure_row_contiguous,
                                shared_memory) if self.run else None

        def kernel(*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, init_value=None,
                   verbose=False, stream=None):
            import mlx.core as mx

            self.calls.append(dict(factory=factory, inputs=list(inputs), output_shapes=list(output_shapes),
                                   output_dtypes=list(output_dtypes), grid=grid, threadgroup=threadgroup,
                                   template=template, init_value=init_value, verbose=verbose, stream=stream))
            if cuda is None:
                return [mx.zeros(tuple(s), dtype=d) for s, d in zip(output_shapes, output_dtypes)]
            descs = [x if isinstance(x, (bool, int, float)) else _kiln.lend(to_numpy(x)) for x in inputs]
            outs = cuda._launch(descs, [tuple(s) for s in output_shapes], [dtype_name(d) for d in output_dtypes],
                                tuple(grid), tuple(threadgroup), kiln_template(template), init_value, self.device)
            return [to_mlx(host_output(o.to_host(), "numpy")) for o in outs]

        return kernel


def other_kind_of_grid(grid, threadgroup):
    """A grid of partial threadgroups where ``grid`` is a whole number of them, and the grid
    rounded up to whole groups where it is not (None where every threadgroup dimension is 1)."""
    group = [min(t, g) for g, t in zip(grid, threadgroup)]
    if any(g % t for g, t in zip(grid, group)):
        return tuple(-(-g // t) * t for g, t in zip(grid, group))
    for d, t in enumerate(threadgroup):
        if t > 1 and t <= 1024:
            return tuple(t + 1 if k == d else g for k, g in enumerate(grid))
    return None


class Recorder:
    """Compiles, once per distinct program, the ``cuda_kernel`` source of every successful
    kernel call made while :meth:`recording`, through kiln's ``CudaKernel`` with NVRTC."""

    def __init__(self):
        self.compiled: set = set()
        self.pending: list = []

    def add(self, kiln_kernel, inputs, output_shapes, output_dtypes, grid, threadgroup, template):
        op = f"metal_kernel {kiln_kernel.name}"
        kinds = [kind(x) for x in inputs]
        shapes, dtypes = check_arg.shapes(op, output_shapes), check_arg.dtypes(op, output_dtypes)
        tmpl = check_arg.template(op, template)
        grid, threadgroup = check_arg.dims(op, "grid", grid), check_arg.dims(op, "threadgroup", threadgroup)
        if 0 in grid:
            return
        # The call's own grid, and one of the other kind (whole groups, or partial ones), so both
        # forms of the source compile.
        for g in dict.fromkeys([grid, other_kind_of_grid(grid, threadgroup)]):
            if g is None:
                continue
            got = _kiln.mlx_cuda_kernel_source(kiln_kernel, kinds, shapes, dtypes, g, threadgroup, tmpl)
            if "unsupported" in got:
                continue
            ins = kinds + [("uint32", (3,))] if got["grid_input"] is not None else kinds
            key = (got["header"], got["source"], tuple(got["input_names"]), tuple(ins), tuple(dtypes), tuple(tmpl))
            if key not in self.compiled:
                self.compiled.add(key)
                self.pending.append((kiln_kernel.name, got, ins, shapes, dtypes, tmpl))

    def compile_pending(self):
        """Compiles what was recorded; raises AssertionError naming every kernel that failed.
        With ``KILN_MLX_SOURCE`` (an MLX checkout) and CUDA's headers installed, each source is
        also compiled inside MLX's own wrapper with MLX's headers."""
        failures = []
        mlx_root = os.environ.get("KILN_MLX_SOURCE")
        in_mlx = bool(mlx_root) and bool(cuda_include_dirs())
        for name, got, kinds, shapes, dtypes, tmpl in self.pending:
            k = _kiln.CudaKernel(got["name"], got["input_names"], got["output_names"], got["source"], got["header"],
                                 got["ensure_row_contiguous"], got["shared_memory"])
            try:
                assert k._compile(kinds, shapes, dtypes, tmpl, ARCH) > 1000
                if in_mlx:
                    compile_in_mlx_wrapper(mlx_root, got, [(d, len(s)) for d, s in kinds], dtypes, tmpl)
            except Exception as e:  # noqa: BLE001 - reported together below
                failures.append(f"{name} {kinds}: {e}")
        self.pending.clear()
        if failures:
            raise AssertionError("cuda_kernel sources that do not compile for sm_90:\n" + "\n".join(failures))

    @contextlib.contextmanager
    def recording(self):
        """Records the calls of ``kiln.metal_kernel`` and drop-in (``kiln.mlx``) kernels."""
        import kiln._kernel
        import kiln.mlx

        recorder = self
        kiln_call = kiln._kernel.MetalKernel.__call__
        mlx_call = kiln.mlx.MetalKernel.__call__

        def kiln_recorded(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, **kw):
            outs = kiln_call(self, inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes, grid=grid,
                             threadgroup=threadgroup, template=template, **kw)
            if all(isinstance(a, (list, tuple)) for a in (inputs, output_shapes, output_dtypes)):
                recorder.add(self, inputs, output_shapes, output_dtypes, grid, threadgroup, template)
            return outs

        def mlx_recorded(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, **kw):
            import mlx.core as mx

            outs = mlx_call(self, inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes, grid=grid,
                            threadgroup=threadgroup, template=template, **kw)
            # Arguments the call consumed (iterators) cannot be read again: such calls go unrecorded.
            if not all(isinstance(a, (list, tuple)) for a in (inputs, output_shapes, output_dtypes)):
                return outs
            ins = [x if isinstance(x, (mx.array, bool, int, float)) else mx.array(x) for x in inputs]
            recorder.add(self._kiln, ins, output_shapes, output_dtypes, grid, threadgroup, template)
            return outs

        # kiln.MetalKernel's call is its extension base's: removed again afterwards, not
        # replaced by a Python-level copy, so later calls keep the extension's own slot.
        own = kiln._kernel.MetalKernel.__dict__.get("__call__")
        kiln._kernel.MetalKernel.__call__ = kiln_recorded
        kiln.mlx.MetalKernel.__call__ = mlx_recorded
        try:
            yield self
        finally:
            if own is None:
                del kiln._kernel.MetalKernel.__call__
            else:
                kiln._kernel.MetalKernel.__call__ = own
            kiln.mlx.MetalKernel.__call__ = mlx_call


# MLX's CUDA element types (mlx/backend/cuda/utils.cpp's dtype_to_cuda_type).
_CUDA_TYPES = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
               "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
               "float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float"}
# The Metal type strings MLX's kernel names use for dtype template arguments.
_METAL_TYPES = {"float16": "float16_t", "bfloat16": "bfloat16_t", "float32": "float"}


def cuda_include_dirs():
    """CUDA's headers from the nvidia wheels (PyTorch's dependencies), where installed."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    for root in roots:
        for inc in sorted(glob.glob(os.path.join(root, "cu1*", "include")), reverse=True):
            if os.path.exists(os.path.join(inc, "cuda_fp16.h")) and os.path.isdir(os.path.join(inc, "cccl")):
                return [inc, os.path.join(inc, "cccl")]
    return []


def mlx_wrapper(got, inputs, output_dtypes, template):
    """The text MLX's custom_kernel.cpp (build_kernel) compiles for a cuda_kernel with these
    factory arguments (``got``), inputs of these (dtype, ndim) and this template; and the
    kernel's name."""
    body = got["source"]
    name = "custom_kernel_" + got["name"]
    for _, v in template:
        name += ("_t" if v else "_f") if isinstance(v, bool) else f"_{v}" if isinstance(v, int) else \
            "_" + _METAL_TYPES.get(v, _CUDA_TYPES[v])
    s = '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n' + got["header"]
    s += "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n__global__ void " + name + "(\n"
    for n, (dtype, ndim) in zip(got["input_names"], inputs):
        s += f"    const {_CUDA_TYPES[dtype]}* {n},\n"
        if ndim > 0:
            for suffix, decl in (("_shape", "Shape"), ("_strides", "Strides"), ("_ndim", "int")):
                if n + suffix in body:
                    s += f"    const __grid_constant__ {decl} {n}{suffix},\n"
    outs = [f"    {_CUDA_TYPES[d]}* {n}" for n, d in zip(got["output_names"], output_dtypes)]
    s += ",\n".join(outs) + ") {\n"
    for n, v in template:
        if isinstance(v, bool):
            s += f"  constexpr bool {n} = {'true' if v else 'false'};\n"
        elif isinstance(v, int):
            s += f"  constexpr int {n} = {v};\n"
        else:
            s += f"  using {n} = {_CUDA_TYPES[v]};\n"
    if template:
        s += "\n"
    return s + body + "\n}\n\n} // namespace mlx::core::cu\n", name


def compile_in_mlx_wrapper(mlx_root, got, inputs, output_dtypes, template, arch="sm_90a"):
    """Compiles :func:`mlx_wrapper`'s text as MLX's jit_module does (its device headers by name,
    CUDA's on the include path, ``--device-as-default-execution-space``); returns NVRTC's log,
    or raises AssertionError with it when the compile fails."""
    import ctypes

    lib = None
    for soname in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            lib = ctypes.CDLL(soname)
            break
        except OSError:
            continue
    assert lib is not None, "libnvrtc cannot be loaded"
    text, name = mlx_wrapper(got, inputs, output_dtypes, template)
    device = os.path.join(mlx_root, "mlx", "backend", "cuda", "device")
    files = sorted(f for f in os.listdir(device) if f.endswith((".cuh", ".h")))
    headers = [open(os.path.join(device, f), "rb").read() for f in files]
    names = [f"mlx/backend/cuda/device/{f}".encode() for f in files]
    prog = ctypes.c_void_p()
    n = len(files)
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), b"kernel.cu", n, (ctypes.c_char_p * n)(*headers),
                                  (ctypes.c_char_p * n)(*names)) == 0
    try:
        assert lib.nvrtcAddNameExpression(prog, f"mlx::core::cu::{name}".encode()) == 0
        opts = [b"--device-as-default-execution-space", f"--gpu-architecture={arch}".encode()]
        opts += [f"--include-path={d}".encode() for d in cuda_include_dirs()]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        log = log.value.decode(errors="replace")
        assert rc == 0, f"NVRTC failed ({rc}):\n{log}"
        return log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
