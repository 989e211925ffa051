#!/usr/bin/env python3
"""What the MLX drop-in (kiln.mlx) costs beside kiln on NumPy, on the MLX build installed here
(the CPU wheel: kernels on kiln's CPU emulator; the CUDA wheel: on the GPU):

1. Host cost of one call of a tiny kernel (``out = x + 1``, 1024 float32): the drop-in on MLX
   arrays, kiln.metal_kernel on NumPy arrays, and the drop-in's own parts (evaluating and
   reading the inputs through DLPack, allocating the MLX outputs).
2. A large elementwise kernel (``exp``, 4 M float32): the drop-in beside kiln on NumPy, and the
   one extra pass over memory the drop-in makes: MLX allocates and zero-fills each output
   (``mx.zeros`` + eval) for kiln to write in place; inputs are never copied. For scale, the
   copy the drop-in avoids (``mx.array(numpy_output)``).
3. A downstream kernel through kiln beside its pure-MLX fallback: mlx-lm's gated-delta
   recurrence (``gated_delta_kernel`` vs ``gated_delta_ops``), B=1, T=64, Hk=4, Hv=8, Dk=Dv=128.

Usage: python bench/mlx_dropin_cost.py  (with kiln, mlx and mlx-lm installed)
"""
import importlib
import time

import numpy as np

import kiln
import kiln.mlx

kiln.mlx.install()
import mlx.core as mx  # noqa: E402

ADD_ONE = "uint i = thread_position_in_grid.x; out[i] = x[i] + 1;"
EXP = "uint i = thread_position_in_grid.x; out[i] = metal::exp(x[i]);"


def mean_us(fn, calls):
    for _ in range(max(3, calls // 10)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def sync():
    mx.synchronize()


def call_args(n):
    return dict(grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)])


def main():
    print(f"MLX {mx.__version__}, default device {mx.default_device()}; kiln devices: "
          f"{', '.join(d for d, _ in kiln.devices())}")
    n = 1024
    dropin = mx.fast.metal_kernel(name="add_one", input_names=["x"], output_names=["out"], source=ADD_ONE)
    native = kiln.metal_kernel("add_one", ["x"], ["out"], ADD_ONE)
    xm = mx.random.normal((n,))
    xn = np.asarray(xm).copy()
    mx.eval(xm)
    kw = call_args(n)
    t_dropin = mean_us(lambda: (dropin(inputs=[xm], output_dtypes=[mx.float32], **kw), sync()), 2000)
    t_native = mean_us(lambda: native(inputs=[xn], output_dtypes=[np.float32], **kw), 2000)
    t_inputs = mean_us(lambda: (mx.eval(xm), kiln.mlx.describe_dlpack(xm)), 2000)
    t_outputs = mean_us(lambda: mx.eval(mx.zeros((n,))), 2000)
    print(f"1. tiny kernel, host us/call: drop-in on MLX {t_dropin:.1f}; kiln on NumPy {t_native:.1f}; "
          f"drop-in parts: inputs (eval + DLPack) {t_inputs:.1f}, output (mx.zeros + eval) {t_outputs:.1f}")

    n = 4 << 20
    dropin = mx.fast.metal_kernel(name="exp", input_names=["x"], output_names=["out"], source=EXP)
    native = kiln.metal_kernel("exp", ["x"], ["out"], EXP)
    xm = mx.random.normal((n,))
    mx.eval(xm)
    xn = np.asarray(xm).copy()
    kw = call_args(n)
    t_dropin = mean_us(lambda: (dropin(inputs=[xm], output_dtypes=[mx.float32], **kw), sync()), 20) / 1e3
    t_native = mean_us(lambda: native(inputs=[xn], output_dtypes=[np.float32], **kw), 20) / 1e3
    t_fill = mean_us(lambda: mx.eval(mx.zeros((n,))), 20) / 1e3
    t_copy = mean_us(lambda: mx.eval(mx.array(xn)), 20) / 1e3
    print(f"2. exp over 4 M float32, ms/call: drop-in {t_dropin:.2f}; kiln on NumPy {t_native:.2f}; "
          f"output allocation + zero fill {t_fill:.2f}; the avoided copy mx.array(numpy) {t_copy:.2f}")

    gd = importlib.import_module("mlx_lm.models.gated_delta")
    if gd._gated_delta_kernel is None:
        gd = importlib.reload(gd)
    mx.random.seed(0)
    B, T, Hk, Hv, D = 1, 64, 4, 8, 128
    q, k = (mx.random.normal((B, T, Hk, D)) * D**-0.5 for _ in range(2))
    v = mx.random.normal((B, T, Hv, D))
    g = mx.random.uniform(0.6, 1.0, (B, T, Hv))
    beta = mx.random.uniform(0, 1, (B, T, Hv))
    state = mx.zeros((B, Hv, D, D))
    mx.eval(q, k, v, g, beta, state)
    t_kernel = mean_us(lambda: mx.eval(*gd.gated_delta_kernel(q, k, v, g, beta, state)), 5) / 1e3
    t_ops = mean_us(lambda: mx.eval(*gd.gated_delta_ops(q, k, v, g, beta, state)), 5) / 1e3
    print(f"3. mlx-lm gated delta (T={T}, Hv={Hv}, D={D}), ms/call: kernel through kiln {t_kernel:.2f}; "
          f"pure-MLX fallback {t_ops:.2f}")


if __name__ == "__main__":
    main()
