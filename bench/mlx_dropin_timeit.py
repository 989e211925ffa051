#!/usr/bin/env python3
"""Host cost of one call of a tiny kernel (``out = x + 1``, 1024 float32) through the MLX drop-in
on MLX CPU arrays, beside kiln's own call on NumPy arrays, the MLX steps the drop-in takes
(``mx.eval``, NumPy's view of an MLX array, ``mx.array`` of a NumPy array) and NumPy's ``x + 1``:
``timeit``, the best of 5 rounds of 2000 calls, two passes. Without ``mx.synchronize()`` (the
drop-in's outputs are evaluated already), unlike ``bench/mlx_dropin_cost.py``.

Usage: python bench/mlx_dropin_timeit.py  (with kiln and MLX's CPU wheel installed)
"""
import timeit

import numpy as np

import kiln
import kiln.mlx

kiln.mlx.install()
import mlx.core as mx  # noqa: E402

SRC = "uint i = thread_position_in_grid.x; out[i] = x[i] + 1;"


def main():
    n = 1024
    dropin = mx.fast.metal_kernel(name="add_one", input_names=["x"], output_names=["out"], source=SRC)
    native = kiln.metal_kernel("add_one", ["x"], ["out"], SRC)
    xm = mx.random.normal((n,))
    mx.eval(xm)
    xn = np.asarray(xm).copy()
    kw = dict(grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)])
    cases = {
        "drop-in on MLX arrays": lambda: dropin(inputs=[xm], output_dtypes=[mx.float32], **kw),
        "kiln on NumPy arrays": lambda: native(inputs=[xn], output_dtypes=[np.float32], **kw),
        "mx.eval(x)": lambda: mx.eval(xm),
        "np.asarray(mlx array)": lambda: np.asarray(xm),
        "mx.array(numpy array)": lambda: mx.array(xn),
        "numpy x + 1": lambda: xn + 1,
    }
    for _ in range(2):
        for name, f in cases.items():
            t = min(timeit.repeat(f, number=2000, repeat=5)) / 2000 * 1e6
            print(f"{name:24s} {t:6.2f} us")


if __name__ == "__main__":
    main()
