"""Drop-in kernels as MLX primitives where MLX runs on CUDA.

A call builds, once per call signature (the inputs' dtypes, ranks and smallness, the template,
the output dtypes, and whether the grid is a whole number of threadgroups), an
``mx.fast.cuda_kernel`` from kiln's lowering of the Metal kernel (``_kiln.mlx_cuda_kernel_source``:
an include of kiln's CUDA prelude, the lowered kernel and its entry shim as the header, one
call of the shim as the body) and returns the outputs MLX makes: lazy, allocated and
``init_value``-filled by MLX, on MLX's stream, so the kernel works inside ``mx.compile``,
``mx.custom_function``, ``mx.grad`` and ``mx.vmap`` as far as MLX's own custom kernels do. A
grid of partial threadgroups passes the grid as one more small input; a grid beyond one CUDA
launch is planned, and run eagerly, call by call.
"""

from __future__ import annotations

import sys
import warnings

from .. import _kiln
from .. import _validate as check_arg
from .._dtypes import dtype_name

_I32 = 2**31
_U32 = 2**32
# Grid inputs by grid, kept for the calls that follow (bounded: grids that grow with a
# sequence would otherwise pile up).
_GRIDS: dict = {}
_MAX_GRIDS = 256


class EagerKernelWarning(UserWarning):
    """A drop-in kernel runs eagerly, outside MLX's graph, on MLX's CUDA build (the message
    says why)."""


class _Plan:
    """The ``cuda_kernel`` of one call signature and what its calls pass besides the call's own
    arguments."""

    __slots__ = ("fn", "grid_input", "template", "dtypes", "source")

    def __init__(self, fn, grid_input, template, dtypes, source):
        self.fn, self.grid_input, self.template, self.dtypes, self.source = fn, grid_input, template, dtypes, source


def _mx_dtype(mx, name):
    return mx.bool_ if name == "bool" else getattr(mx, name)


def _scalar_kind(x):
    """kiln's (and MLX's) dtype of a Python scalar input."""
    if type(x) is bool:
        return "bool"
    if type(x) is int:
        return "int32" if -_I32 <= x < _I32 else "int64"
    return "float32"


def _signature(mx, inputs):
    """What the generated source depends on, per input."""
    sig = []
    for x in inputs:
        if isinstance(x, mx.array):
            sig.append((x.dtype, x.ndim, x.size < 8))
        else:
            sig.append(_scalar_kind(x))
    return tuple(sig)


def _kinds(mx, inputs):
    """Each input's (dtype name, shape), which is all the lowering reads."""
    return [(dtype_name(x.dtype), tuple(x.shape)) if isinstance(x, mx.array) else (_scalar_kind(x), ())
            for x in inputs]


def _dims(op, what, value):
    """``value`` as three integers in [0, 2^32) (checked quickly for a tuple of ints)."""
    if type(value) is tuple and len(value) == 3:
        a, b, c = value
        if type(a) is int and type(b) is int and type(c) is int and 0 <= a < _U32 and 0 <= b < _U32 and 0 <= c < _U32:
            return value
    return check_arg.dims(op, what, value)


def _grid_array(mx, grid):
    a = _GRIDS.get(grid)
    if a is None:
        if len(_GRIDS) >= _MAX_GRIDS:
            _GRIDS.clear()
        a = _GRIDS[grid] = mx.array(list(grid), dtype=mx.uint32)
    return a


def _warn_once(kernel, reason):
    """Warns once per kernel and reason."""
    if reason not in kernel._warned:
        kernel._warned.add(reason)
        warnings.warn(EagerKernelWarning(f"[metal_kernel {kernel.name}] runs eagerly, outside MLX's graph: {reason}"),
                      stacklevel=4)



def call(kernel, factory, mx, inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, verbose,
         stream):
    """The lazy outputs of one call of the drop-in ``kernel``, or None where the call must run
    eagerly (with a one-time warning naming why). Raises the call's own errors."""
    op = f"metal_kernel {kernel.name}"
    grid = _dims(op, "grid", grid)
    threadgroup = _dims(op, "threadgroup", threadgroup)
    gx, gy, gz = grid
    tx, ty, tz = threadgroup
    if not (gx and gy and gz):
        # No thread runs: kiln fills the outputs with init_value or refuses (eagerly, at once).
        return None
    valid_group = tx and ty and tz and tx * ty * tz <= 1024
    # A plan is kept per call signature, which leaves the grid out: a grid beyond one launch is
    # planned (and refused, with its own reason) call by call.
    cacheable = bool(valid_group) and len(output_shapes) == len(output_dtypes)
    padded = cacheable and bool(gx % min(tx, gx) or gy % min(ty, gy) or gz % min(tz, gz))
    cacheable = cacheable and _kiln.mlx_cuda_launch_limit(grid, threadgroup) is None
    try:
        tkey = tuple((n, type(v), v) for n, v in template) if template else ()
        key = (_signature(mx, inputs), tkey, tuple(output_dtypes), padded) if cacheable else None
        plan = kernel._plans.get(key) if cacheable else None
    except TypeError:
        key, plan = None, None
    if plan is None:
        plan = _plan(kernel, factory, mx, op, inputs, output_shapes, output_dtypes, grid, threadgroup, template)
        if key is not None:
            kernel._plans[key] = plan
    if isinstance(plan, str):
        _warn_once(kernel, plan)
        return None
    if verbose:
        text = _kiln.mlx_metal_verbose_text(kernel._kiln, _kinds(mx, inputs), check_arg.shapes(op, output_shapes),
                                            check_arg.dtypes(op, output_dtypes), check_arg.template(op, template))
        sys.stdout.write(text)
        sys.stdout.flush()
    if plan.grid_input:
        inputs = list(inputs) + [_grid_array(mx, grid)]
    # As Metal does, a kernel runs on the GPU even where the default device is the CPU.
    return plan.fn(inputs=inputs, output_shapes=output_shapes, output_dtypes=plan.dtypes, grid=grid,
                   threadgroup=threadgroup, template=plan.template, init_value=check_arg.init_value(op, init_value),
                   verbose=verbose == "cuda", stream=mx.gpu if stream is None else stream)


def _plan(kernel, factory, mx, op, inputs, output_shapes, output_dtypes, grid, threadgroup, template):
    """The plan of a call signature (validating the call as the eager path does), or the
    reason it runs eagerly."""
    shapes = check_arg.shapes(op, output_shapes)
    dtypes = check_arg.dtypes(op, output_dtypes)
    tmpl = check_arg.template(op, template)
    got = _kiln.mlx_cuda_kernel_source(kernel._kiln, _kinds(mx, inputs), shapes, dtypes, grid, threadgroup, tmpl)
    if "unsupported" in got:
        return got["unsupported"]
    try:
        fn = factory(got["name"], got["input_names"], got["output_names"], got["source"], got["header"],
                     got["ensure_row_contiguous"], got["shared_memory"])
    except Exception as e:  # noqa: BLE001 - any refusal of MLX's factory keeps the kernel running
        return f"mx.fast.cuda_kernel refused it ({type(e).__name__}: {e})"
    mlx_template = [(n, _mx_dtype(mx, v) if isinstance(v, str) else v) for n, v in tmpl] or None
    return _Plan(fn, got["grid_input"] is not None, mlx_template, [_mx_dtype(mx, d) for d in dtypes], got)
