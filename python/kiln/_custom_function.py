"""``kiln.custom_function`` and the transforms that use its rules: MLX's ``mx.custom_function``
(``.vjp`` / ``.jvp``), ``mx.vjp``, ``mx.jvp``, ``mx.grad`` and ``mx.value_and_grad`` in MLX's
shapes, for functions of kiln kernels.

NumPy has no autodiff, so on NumPy arrays a transform uses the rule the function defines (a
backward kernel, say) — which is what a kernel's backward test on the CPU needs. On PyTorch
tensors a custom function with a VJP is a PyTorch custom op with autograd (``kiln.torch``), so
it composes with the rest of a model, ``torch.autograd`` and ``torch.compile``.
"""

from __future__ import annotations

import functools

from ._arrays import torch_module
from .errors import InvalidArgumentError


class custom_function:  # noqa: N801 - MLX's name
    """Decorates a function of kiln kernels so that transforms use the rules defined with
    :meth:`vjp` and :meth:`jvp` (MLX's ``mx.custom_function``)::

        @kiln.custom_function
        def grid_sample(x, grid):
            return GRID_SAMPLE(inputs=[x, grid], ...)[0]

        @grid_sample.vjp
        def grid_sample_vjp(primals, cotangent, output):
            x, grid = primals
            return tuple(GRID_SAMPLE_VJP(inputs=[x, grid, cotangent], ..., init_value=0))

    As in MLX, ``primals`` is the single positional argument or the tuple of them,
    ``cotangents`` and ``outputs`` have the structure of the function's result (one array or a
    tuple), and the VJP returns one cotangent per primal (``None`` for one without a gradient).
    ``jvp(primals, tangents)`` returns tangents of the outputs' structure. Called on PyTorch
    tensors that need gradients (or under ``torch.compile``), the function runs as a PyTorch
    custom op whose backward is the VJP (a backward through one without a VJP is an error); the
    op is registered when the function is defined if PyTorch is imported by then, else at its
    first call on tensors, which must then not be under ``torch.compile``.
    """

    def __init__(self, f):
        if not callable(f):
            raise InvalidArgumentError(f"[custom_function] expected a callable, got {f!r}")
        functools.update_wrapper(self, f)
        self.fun = f
        self.vjp_fun = None
        self.jvp_fun = None
        self._torch = None
        if torch_module() is not None:
            # Defined now, so that a first call under torch.compile finds the op (the tracer
            # cannot register one).
            self._torch_op()

    def vjp(self, f):
        """Sets the VJP rule ``f(primals, cotangents, outputs)``; returns this function (as MLX)."""
        self.vjp_fun = f
        return self

    def jvp(self, f):
        """Sets the JVP rule ``f(primals, tangents)``; returns this function (as MLX)."""
        self.jvp_fun = f
        return self

    def __call__(self, *args, **kwargs):
        torch = torch_module()
        if torch is not None and _wants_torch_autograd(torch, args, kwargs):
            return self._torch_op()(args, kwargs)
        return self.fun(*args, **kwargs)

    def _torch_op(self):
        if self._torch is None:
            from ._torch_ops import _FunctionOp

            self._torch = _FunctionOp(self)
        return self._torch

    def __repr__(self):
        return f"<kiln.custom_function {getattr(self.fun, '__qualname__', self.fun)!r}>"


def _wants_torch_autograd(torch, args, kwargs) -> bool:
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not tensors:
        return False
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _primals_arg(primals):
    """MLX passes a lone positional argument itself, several as a tuple."""
    return primals[0] if len(primals) == 1 else tuple(primals)


def _as_list(outputs):
    if isinstance(outputs, (tuple, list)):
        return list(outputs), True
    return [outputs], False


def _structured(values, is_sequence):
    return tuple(values) if is_sequence else values[0]


def _is_torch(values) -> bool:
    torch = torch_module()
    return torch is not None and any(isinstance(v, torch.Tensor) for v in values)


def _cotangents_list(where, result, n):
    """A VJP's result as one entry per primal."""
    if n == 1 and not isinstance(result, (tuple, list)):
        return [result]
    if not isinstance(result, (tuple, list)) or len(result) != n:
        got = len(result) if isinstance(result, (tuple, list)) else 1
        raise InvalidArgumentError(f"[{where}] the VJP returned {got} cotangents for {n} primals")
    return list(result)


def vjp(fun, primals, cotangents):
    """``mx.vjp(fun, primals, cotangents)``: runs ``fun(*primals)`` and returns ``(outputs,
    vjps)`` as lists. On NumPy arrays ``fun`` must be a :class:`custom_function` with a VJP
    (its rule is the backward); on PyTorch tensors any function of kiln custom functions and
    PyTorch ops works (``torch.autograd`` does the chaining). A primal that does not reach the
    outputs gets ``None`` on PyTorch, as PyTorch reports it."""
    primals, cotangents = list(primals), list(cotangents)
    if _is_torch(primals):
        return _torch_vjp(fun, primals, cotangents)
    rule = getattr(fun, "vjp_fun", None)
    if rule is None:
        raise InvalidArgumentError(
            "[vjp] on NumPy arrays the function must be a kiln.custom_function with a .vjp rule"
        )
    outputs, is_sequence = _as_list(fun.fun(*primals))
    if len(cotangents) != len(outputs):
        raise InvalidArgumentError(f"[vjp] got {len(cotangents)} cotangents for {len(outputs)} outputs")
    result = rule(_primals_arg(primals), _structured(cotangents, is_sequence), _structured(outputs, is_sequence))
    return outputs, _cotangents_list("vjp", result, len(primals))


def _torch_vjp(fun, primals, cotangents):
    torch = torch_module()
    with torch.enable_grad():
        leaves = [p.detach().requires_grad_(True) if isinstance(p, torch.Tensor) and p.is_floating_point() else p
                  for p in primals]
        outputs, _ = _as_list(fun(*leaves))
        if len(cotangents) != len(outputs):
            raise InvalidArgumentError(f"[vjp] got {len(cotangents)} cotangents for {len(outputs)} outputs")
        wrt = [p for p in leaves if isinstance(p, torch.Tensor) and p.requires_grad]
        grads = iter(torch.autograd.grad(outputs, wrt, cotangents, allow_unused=True))
    vjps = [next(grads) if isinstance(p, torch.Tensor) and p.requires_grad else None for p in leaves]
    return [o.detach() for o in outputs], vjps


def jvp(fun, primals, tangents):
    """``mx.jvp(fun, primals, tangents)``: runs ``fun(*primals)`` and its JVP rule; returns
    ``(outputs, jvps)`` as lists. ``fun`` must be a :class:`custom_function` with a JVP."""
    rule = getattr(fun, "jvp_fun", None)
    if rule is None:
        raise InvalidArgumentError("[jvp] the function must be a kiln.custom_function with a .jvp rule")
    primals, tangents = list(primals), list(tangents)
    if len(tangents) != len(primals):
        raise InvalidArgumentError(f"[jvp] got {len(tangents)} tangents for {len(primals)} primals")
    outputs, _ = _as_list(fun.fun(*primals))
    result, _ = _as_list(rule(_primals_arg(primals), _primals_arg(tangents)))
    if len(result) != len(outputs):
        raise InvalidArgumentError(f"[jvp] the JVP returned {len(result)} tangents for {len(outputs)} outputs")
    return outputs, result


def value_and_grad(fun, argnums=0):
    """``mx.value_and_grad(fun, argnums=0)``: a function returning ``(fun(*args), gradients)``
    for a ``fun`` whose (first) output is a scalar; the gradients are of the arguments
    ``argnums`` (an int gives one gradient, a sequence a tuple)."""
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)

    def wrapped(*args):
        for n in nums:
            if not -len(args) <= n < len(args):
                raise InvalidArgumentError(f"[grad] argnums {n} out of range for {len(args)} arguments")
        value, probe = _scalar_output(fun, args)
        outputs, vjps = vjp(fun, args, probe)
        grads = tuple(vjps[n] for n in nums)
        return value, grads[0] if single else grads

    return wrapped


def grad(fun, argnums=0):
    """``mx.grad(fun, argnums=0)``: the gradient of a scalar-valued ``fun`` (see
    :func:`value_and_grad`)."""
    both = value_and_grad(fun, argnums)
    return lambda *args: both(*args)[1]


def _scalar_output(fun, args):
    """The value of ``fun(*args)`` and cotangents seeding its scalar (first) output."""
    import numpy as np

    inner = getattr(fun, "fun", fun)
    outputs, is_sequence = _as_list(inner(*args))
    first = outputs[0]
    if int(np.prod(first.shape)) != 1:
        raise InvalidArgumentError(
            "[grad] the function must return a scalar (one element), or a list whose first entry is one; "
            "use kiln.vjp for other outputs"
        )
    torch = torch_module()
    if torch is not None and isinstance(first, torch.Tensor):
        seeds = [torch.ones_like(first)] + [torch.zeros_like(o) for o in outputs[1:]]
    else:
        seeds = [np.ones_like(first)] + [np.zeros_like(o) for o in outputs[1:]]
    return _structured(outputs, is_sequence), seeds
