"""The PyTorch custom ops behind :func:`kiln.torch.custom_op` and :class:`kiln.custom_function`
on tensors: an op, its fake and its backward op defined from Python functions. Both modules
use it and it uses neither, so importing one never needs the other half-initialised."""

from __future__ import annotations

import ast
import itertools
import re

import torch

from ._abstract import describing
from .errors import InvalidArgumentError

_TENSOR = "Tensor"
_TENSOR_LIST = "List[Tensor]"


def _parse(name, schema):
    return torch._C.parse_schema(name + schema)


def _restructure(values, structure):
    """Output values as the op returns them: one tensor, a tuple or a list."""
    if structure == "single":
        return values[0]
    return tuple(values) if structure == "tuple" else list(values)


def _fresh(values, inputs):
    """Custom ops may not return their inputs: a returned input is copied."""
    seen = {id(t) for t in inputs if isinstance(t, torch.Tensor)}
    for t in inputs:
        if isinstance(t, (list, tuple)):
            seen.update(id(u) for u in t if isinstance(u, torch.Tensor))
    return [v.clone() if id(v) in seen else v for v in values]


def _define(name, schema, run, run_vjp, fake):
    """Defines the op ``name`` running ``run`` and, with ``run_vjp``, its backward op and
    autograd formula."""
    parsed = _parse(name, schema)
    kinds = [str(a.type) for a in parsed.arguments]
    returns = [str(r.type) for r in parsed.returns]
    if returns == [_TENSOR_LIST]:
        structure = "list"
    elif returns == [_TENSOR]:
        structure = "single"
    elif returns and all(r == _TENSOR for r in returns):
        structure = "tuple"
    else:
        raise InvalidArgumentError(f"[{name}] a kiln custom op returns tensors; the schema says {schema!r}")

    def outputs_of(result, args):
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        if structure != "list" and len(values) != len(returns):
            raise InvalidArgumentError(f"[{name}] returned {len(values)} outputs; the schema says {len(returns)}")
        return _restructure(_fresh(values, args), structure)

    def forward(*args):
        return outputs_of(run(*args), args)

    op = torch.library.custom_op(name, forward, mutates_args=(), schema=schema)

    if fake is not None:
        op.register_fake(fake)
    else:
        def describe(*args):
            with describing():
                return outputs_of(run(*args), args)

        op.register_fake(describe)

    if run_vjp is None:
        return op

    args_text = schema[schema.index("(") + 1: schema.rindex("->")].strip()[:-1].strip()
    backward_schema = "(Tensor[] kiln_cotangents, Tensor[] kiln_outputs" + (", " + args_text if args_text else "") + \
        ") -> Tensor[]"

    def grads_of(cotangents, outputs, *args):
        grads = run_vjp(list(args), list(cotangents), list(outputs), structure)
        flat = []
        for kind, arg, g in zip(kinds, args, grads):
            if kind == _TENSOR:
                flat.append(_grad_like(name, g, arg))
            elif kind == _TENSOR_LIST:
                gs = list(g) if g is not None else [None] * len(arg)
                flat.extend(_grad_like(name, gi, a) for gi, a in zip(gs, arg))
        return _fresh(flat, [*cotangents, *outputs, *args])

    backward_op = torch.library.custom_op(name + "_vjp", grads_of, mutates_args=(), schema=backward_schema)

    def describe_grads(cotangents, outputs, *args):
        with describing():
            return grads_of(cotangents, outputs, *args)

    backward_op.register_fake(describe_grads)

    def setup_context(ctx, inputs, output):
        saved, consts = [], []
        for kind, arg in zip(kinds, inputs):
            if kind == _TENSOR:
                saved.append(arg)
            elif kind == _TENSOR_LIST:
                saved.extend(arg)
            consts.append(None if kind in (_TENSOR, _TENSOR_LIST) else arg)
        outs = list(output) if isinstance(output, (tuple, list)) else [output]
        ctx.layout = ([len(a) if k == _TENSOR_LIST else 1 for k, a in zip(kinds, inputs)], consts, len(outs))
        ctx.save_for_backward(*saved, *outs)

    def backward(ctx, *grads):
        if structure == "list" and len(grads) == 1 and isinstance(grads[0], (tuple, list)):
            grads = tuple(grads[0])
        counts, consts, n_out = ctx.layout
        saved = list(ctx.saved_tensors)
        outs = saved[len(saved) - n_out:]
        flat = iter(saved[:len(saved) - n_out])
        args = []
        for kind, count, const in zip(kinds, counts, consts):
            if kind == _TENSOR:
                args.append(next(flat))
            elif kind == _TENSOR_LIST:
                args.append([next(flat) for _ in range(count)])
            else:
                args.append(const)
        cotangents = [torch.zeros_like(o) if g is None else g for g, o in zip(grads, outs)]
        flat_grads = iter(backward_op(cotangents, outs, *args))
        result = []
        for kind, arg in zip(kinds, args):
            if kind == _TENSOR:
                g = next(flat_grads)
                result.append(g if arg.is_floating_point() else None)
            elif kind == _TENSOR_LIST:
                result.append([g if a.is_floating_point() else None for g, a in zip(flat_grads, arg)])
            else:
                result.append(None)
        return tuple(result)

    op.register_autograd(backward, setup_context=setup_context)
    return op


def _grad_like(name, g, arg):
    """A cotangent for ``arg``: zeros where the VJP gave none, in ``arg``'s dtype and shape."""
    if g is None:
        return torch.zeros_like(arg)
    if not isinstance(g, torch.Tensor):
        raise InvalidArgumentError(f"[{name}] the VJP returned a {type(g).__name__}, not a tensor")
    if tuple(g.shape) != tuple(arg.shape):
        raise InvalidArgumentError(
            f"[{name}] the VJP returned a cotangent of shape {tuple(g.shape)} for an argument of shape {tuple(arg.shape)}"
        )
    return g if g.dtype == arg.dtype else g.to(arg.dtype)


_COUNTER = itertools.count()


class _FunctionOp:
    """A :class:`kiln.custom_function` on tensors: one custom op taking the call's tensors as a
    list and the rest of its arguments as a key into the calls seen so far."""

    _SLOT = "<tensor>"

    def __init__(self, cf):
        self.cf = cf
        self.structures = {}
        ident = re.sub(r"\W", "_", getattr(cf.fun, "__qualname__", "function"))
        name = f"kiln_custom_function::{ident}_{next(_COUNTER)}"
        self.op = _define(name, "(Tensor[] tensors, str call) -> Tensor[]", self._run, self._run_vjp, None)

    def __call__(self, args, kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        key = self._key(args, kwargs)
        outputs = self.op(tensors, key)
        return _restructure(outputs, self.structures[key])

    def _key(self, args, kwargs):
        # The key spells the call's constant arguments out (read back with literal_eval), so
        # that tracing it under torch.compile needs no state kept between calls.
        template = (tuple(self._SLOT if isinstance(a, torch.Tensor) else a for a in args),
                    tuple(sorted((k, self._SLOT if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items())))
        return repr(template)

    def _arguments(self, tensors, key):
        try:
            args_t, kwargs_t = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            raise InvalidArgumentError(
                f"[custom_function {self.cf.__name__}] on tensors, the arguments besides tensors must be "
                f"Python literals (numbers, strings, None, tuples); got {key}"
            ) from None
        it = iter(tensors)
        args = [next(it) if a == self._SLOT else a for a in args_t]
        kwargs = {k: next(it) if v == self._SLOT else v for k, v in kwargs_t}
        return args, kwargs

    def _run(self, tensors, key):
        args, kwargs = self._arguments(tensors, key)
        result = self.cf.fun(*args, **kwargs)
        if isinstance(result, (tuple, list)):
            self.structures[key] = "tuple"
            return list(result)
        self.structures[key] = "single"
        return [result]

    def _run_vjp(self, op_args, cotangents, outputs, _structure):
        tensors, key = op_args
        if self.cf.vjp_fun is None:
            raise InvalidArgumentError(f"[custom_function {self.cf.__name__}] has no .vjp to differentiate it with")
        args, kwargs = self._arguments(tensors, key)
        structure = self.structures[key]
        primals = args[0] if len(args) == 1 else tuple(args)
        result = self.cf.vjp_fun(primals, _restructure(cotangents, structure), _restructure(outputs, structure),
                                 **kwargs)
        if len(args) == 1 and not isinstance(result, (tuple, list)):
            result = [result]
        if not isinstance(result, (tuple, list)) or len(result) != len(args):
            raise InvalidArgumentError(
                f"[custom_function {self.cf.__name__}] the VJP must return {len(args)} cotangents (one per primal)"
            )
        grads = [g for a, g in zip(args, result) if isinstance(a, torch.Tensor)]
        # Keyword tensors get no cotangent from an MLX-shaped VJP.
        grads += [None] * (len(tensors) - len(grads))
        return [grads, None]
