"""kiln kernels as PyTorch custom ops with gradients.

:func:`custom_op` turns a Python function of kiln kernels into a ``torch.library.custom_op``:
its fake (``register_fake``) is the same function with every kernel call describing its outputs
from its launch description (``output_shapes``, ``output_dtypes``, on the lead input's device)
instead of running, and its backward (``register_autograd``) is a VJP in MLX's shape, itself a
second custom op, so the op works in eager mode, under autograd, and under
``torch.compile(fullgraph=True)`` without graph breaks, and ``torch.library.opcheck`` passes.

CPU tensors run on kiln's CPU emulator; CUDA tensors on their own GPU, on PyTorch's current
stream of that device. Importing this module imports PyTorch; ``import kiln`` does not.
"""

from __future__ import annotations

import inspect

import torch

from ._custom_function import custom_function
from ._kernel import MetalKernel
from ._torch_ops import _define, _parse, _restructure
from .errors import InvalidArgumentError

__all__ = ["custom_op"]


def custom_op(name, fn=None, *, vjp=None, fake=None, schema=None, launch=None, vjp_launch=None):
    """Registers ``fn`` (a function of kiln kernels on tensors) as the PyTorch custom op
    ``name`` (``"namespace::op"``) and returns it (a ``torch.library.custom_op`` object: call it
    like ``fn``; ``torch.ops.namespace.op`` is the same op).

    - ``vjp(primals, cotangents, outputs)`` is the backward, in MLX's ``custom_function``
      shape: ``primals`` is the lone argument or the tuple of them, ``cotangents`` and
      ``outputs`` have the op's output structure; it returns one cotangent per argument
      (``None`` where there is none; non-tensor arguments are ignored). Cotangents of another
      dtype than their argument are cast to it. ``fn`` may be a :class:`kiln.custom_function`,
      whose ``.vjp`` is used.
    - ``fake`` overrides the fake (by default ``fn`` itself, describing its kernels' outputs).
    - ``schema`` overrides the schema inferred from ``fn``'s annotations; unannotated
      parameters are tensors and an unannotated result is one tensor.

    - ``fn`` may also be a kernel (:func:`kiln.metal_kernel`) with ``launch``: a function of the
      op's arguments returning the call's keywords (``output_shapes``, ``output_dtypes``,
      ``grid``, ``threadgroup``, ``template``, ``init_value``; ``inputs`` defaults to the
      arguments). The op's parameters are ``launch``'s and it returns the kernel's outputs.
      Likewise ``vjp`` may be a kernel with ``vjp_launch(primals, cotangents, outputs)``
      returning its keywords, ``inputs`` included; its outputs are the primals' cotangents.

    Usable as a decorator: ``@kiln.torch.custom_op("mylib::op", vjp=op_vjp)``.
    """
    if fn is None:
        return lambda f: custom_op(name, f, vjp=vjp, fake=fake, schema=schema, launch=launch,
                                   vjp_launch=vjp_launch)
    if isinstance(fn, MetalKernel):
        fn = _kernel_function(name, fn, launch)
    elif launch is not None:
        raise InvalidArgumentError(f"[{name}] launch= goes with a kernel, not a function")
    if isinstance(vjp, MetalKernel):
        vjp = _kernel_vjp(name, vjp, vjp_launch)
    if isinstance(fn, custom_function):
        vjp = vjp if vjp is not None else fn.vjp_fun
        fn = fn.fun
    if "::" not in name:
        raise InvalidArgumentError(f"[kiln.torch.custom_op] the name {name!r} must be 'namespace::op'")
    if schema is None:
        schema = _infer_schema(fn)
    n_args = len(_parse(name, schema).arguments)

    def run(*args):
        return fn(*args)

    def run_vjp(args, cotangents, outputs, structure):
        primals = args[0] if n_args == 1 else tuple(args)
        result = vjp(primals, _restructure(cotangents, structure), _restructure(outputs, structure))
        if n_args == 1 and not isinstance(result, (tuple, list)):
            result = [result]
        if not isinstance(result, (tuple, list)) or len(result) != n_args:
            raise InvalidArgumentError(f"[{name}] the VJP must return {n_args} cotangents (one per argument)")
        return list(result)

    return _define(name, schema, run, run_vjp if vjp is not None else None, fake)


def _kernel_function(name, kernel, launch):
    """A kernel and its launch description as a function of the op's arguments."""
    if launch is None:
        raise InvalidArgumentError(f"[{name}] a kernel needs launch=, a function of the op's arguments "
                                   "returning the call's keywords")
    n_out = len(kernel.output_names)

    def run(*args):
        keywords = dict(launch(*args))
        keywords.setdefault("inputs", list(args))
        outputs = kernel(**keywords)
        return outputs[0] if n_out == 1 else tuple(outputs)

    params = inspect.signature(launch, eval_str=True).parameters.values()
    ret = torch.Tensor if n_out == 1 else tuple[(torch.Tensor,) * n_out]
    run.__signature__ = inspect.Signature(list(params), return_annotation=ret)
    return run


def _kernel_vjp(name, kernel, vjp_launch):
    if vjp_launch is None:
        raise InvalidArgumentError(f"[{name}] a VJP kernel needs vjp_launch=, a function of (primals, cotangents, "
                                   "outputs) returning the call's keywords")

    def run(primals, cotangents, outputs):
        keywords = dict(vjp_launch(primals, cotangents, outputs))
        if "inputs" not in keywords:
            raise InvalidArgumentError(f"[{name}] vjp_launch must give the VJP kernel's inputs")
        grads = kernel(**keywords)
        return grads[0] if len(grads) == 1 else tuple(grads)

    return run


def _infer_schema(fn) -> str:
    sig = inspect.signature(fn, eval_str=True)
    params = [p if p.annotation is not p.empty else p.replace(annotation=torch.Tensor)
              for p in sig.parameters.values()]
    ret = sig.return_annotation if sig.return_annotation is not sig.empty else torch.Tensor

    def prototype():
        pass

    prototype.__signature__ = sig.replace(parameters=params, return_annotation=ret)
    return torch.library.infer_schema(prototype, mutates_args=())
