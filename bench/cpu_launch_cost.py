#!/usr/bin/env python3
"""kiln's CPU backend from Python, beside NumPy, in one run: the host cost of one cached call of
a tiny kernel (``out = x + 1`` over 32 float32, one threadgroup of 32 threads) on NumPy arrays,
against NumPy's ``x + 1`` on the same array. Each is called ``--calls`` times back to back
(outputs allocated per call, as each does); the calls take turns for ``--rounds`` rounds (the
host's speed drifts) and each row's median round is its result, with the best round beside it.
Goal (issue: a CPU backend, not only an emulator): kiln at most 5x NumPy.

Usage (with kiln installed): python bench/cpu_launch_cost.py [--calls 2000] [--rounds 7]
"""
import argparse
import statistics
import time

import numpy as np

import kiln


def per_call_us(fn, calls):
    """Mean microseconds per call of ``fn`` over ``calls`` calls."""
    for _ in range(20):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    x = np.arange(32, dtype=np.float32)
    add1 = kiln.metal_kernel(name="add1", input_names=["x"], output_names=["out"],
                             source="uint i = thread_position_in_grid.x;\nout[i] = x[i] + 1.0f;\n")

    def kiln_call():
        return add1(inputs=[x], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32,)],
                    output_dtypes=[np.float32], device="cpu")

    (out,) = kiln_call()
    assert np.array_equal(out, x + 1), "kiln's result differs from NumPy's"
    rows = {"kiln.metal_kernel x + 1 (cpu)": kiln_call, "numpy x + 1": lambda: x + 1}
    times = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            times[name].append(per_call_us(fn, args.calls))
    numpy_median = statistics.median(times["numpy x + 1"])
    print(f"{args.rounds} rounds of {args.calls} calls; per call, median round (best round), and the median against NumPy's")
    for name, t in times.items():
        median = statistics.median(t)
        print(f"  {name:32} {median:9.2f} us ({min(t):8.2f})   {median / numpy_median:7.1f}x numpy")


if __name__ == "__main__":
    main()
