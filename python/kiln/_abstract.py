"""Abstract evaluation: inside :func:`describing`, a kernel call runs nothing and returns fresh
tensors of the shapes and dtypes its launch description names, on the lead input's device.
This is how a Python function of kiln kernels tells PyTorch (``register_fake``, the
``torch.compile`` tracer) what it returns, without a second description to keep in step."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from ._arrays import torch_module
from ._dtypes import dtype_name, torch_dtype
from .errors import InvalidArgumentError

# A context variable, so that one thread tracing does not turn another thread's calls abstract.
_DESCRIBING: ContextVar[bool] = ContextVar("kiln_describing", default=False)

is_describing = _DESCRIBING.get


@contextmanager
def describing():
    """Kernel calls inside describe their outputs instead of running."""
    token = _DESCRIBING.set(True)
    try:
        yield
    finally:
        _DESCRIBING.reset(token)


def lead_tensor(what, arrays):
    """The tensor whose device the outputs take (the first non-0-d tensor, else the first)."""
    torch = torch_module()
    tensors = [a for a in arrays if torch is not None and isinstance(a, torch.Tensor)]
    if not tensors:
        raise InvalidArgumentError(
            f"[{what}] describing outputs (register_fake, torch.compile) needs PyTorch tensor inputs"
        )
    return next((t for t in tensors if t.dim() > 0), tensors[0])


def empty_outputs(what, arrays, shapes, dtypes):
    """Fresh (uninitialised) tensors of ``shapes`` and ``dtypes`` on the lead input's device."""
    if len(shapes) != len(dtypes):
        raise InvalidArgumentError(
            f"[{what}] got {len(shapes)} output shapes and {len(dtypes)} output dtypes"
        )
    lead = lead_tensor(what, arrays)
    torch = torch_module()
    return [torch.empty(tuple(s), dtype=torch_dtype(dtype_name(d)), device=lead.device) for s, d in zip(shapes, dtypes)]
