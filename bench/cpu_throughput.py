#!/usr/bin/env python3
"""kiln's CPU backend beside NumPy on memory-bound work, in one run: ``kiln.ops.exp`` and a body
kernel ``out[elem] = exp(inp[elem])`` over 16M float32, ``kiln.ops.rms_norm`` and
``kiln.ops.softmax`` over 4096x4096 float32, the seed's RMSNorm and softmax body kernels (a
256-thread group per row: ``simd_sum``/``simd_max`` and a fold across SIMD-groups through
threadgroup memory between barriers, which run as region loops) over the same, ``kiln.ops.rope`` over 64 heads x 2048 positions x
128 float32 (NumPy: the same rotation, its angles computed per call as MLX does), a body kernel
that copies, and the machine's copy
bandwidth (``np.copyto`` of 64 MiB into an array already touched). NumPy's rows compute the same
results (rms_norm and softmax as NumPy expressions over the last axis). Every row allocates its
outputs per call, as each library does, except the bandwidth row.

The rows take turns for ``--rounds`` rounds (other work shares the machine); each prints its
median round with the fastest and slowest, its bytes read and written per second (inputs once,
outputs once), kiln's median against NumPy's and the bytes per second against the copy
bandwidth. Goal (issue: a CPU backend, not only an emulator): kiln at or above NumPy's speed and
at 80 % of the copy bandwidth or more, with every core in use.

Usage (with kiln installed): python bench/cpu_throughput.py [--rounds 9]
"""
import argparse
import os
import statistics
import time

import numpy as np

import kiln


def body(name, expr):
    """A body kernel of one element per thread."""
    src = f"uint elem = thread_position_in_grid.x;\nout[elem] = {expr};\n"
    return kiln.metal_kernel(name=name, input_names=["inp"], output_names=["out"], source=src)


# The seed's RMSNorm and softmax bodies (float32, D = 4096).
KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
SEED_RMS_NORM = open(os.path.join(KERNELS, "seed_rms_norm.body")).read()
SEED_SOFTMAX = open(os.path.join(KERNELS, "seed_softmax.body")).read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    n = 1 << 24
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    square = x.reshape(4096, 4096)
    w = (1.0 + 0.1 * rng.standard_normal(4096)).astype(np.float32)
    dst = np.empty_like(x)
    np.copyto(dst, x)
    exp_body, copy_body = body("bench_exp_body", "metal::exp(inp[elem])"), body("bench_copy_body", "inp[elem]")

    def launch(k):
        return lambda: k(inputs=[x], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)],
                         output_dtypes=[np.float32], device="cpu")[0]

    def np_rms_norm():
        return square * (1.0 / np.sqrt(np.mean(square * square, axis=-1, keepdims=True) + 1e-5)) * w

    def np_softmax():
        e = np.exp(square - square.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    heads = x.reshape(64, 2048, 128)
    seed_norm = kiln.metal_kernel(name="bench_seed_rms_norm", input_names=["x", "w"], output_names=["out"],
                                  source=SEED_RMS_NORM)
    seed_softmax = kiln.metal_kernel(name="bench_seed_softmax", input_names=["x"], output_names=["out"],
                                     source=SEED_SOFTMAX)

    def rows_of(k, *inputs):
        return lambda: k(inputs=[square, *inputs], grid=(4096 * 256, 1, 1), threadgroup=(256, 1, 1),
                         output_shapes=[(4096, 4096)], output_dtypes=[np.float32], device="cpu")[0]

    def np_rope():
        half = heads.shape[-1] // 2
        inv_freq = (10000.0 ** (-np.arange(0, half, dtype=np.float32) / half)).astype(np.float32)
        theta = np.arange(heads.shape[1], dtype=np.float32)[:, None] * inv_freq
        cos, sin = np.cos(theta), np.sin(theta)
        x1, x2 = heads[..., :half], heads[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)

    bytes_moved = 2 * x.nbytes
    # (kiln row, NumPy row) pairs; the last row is the copy bandwidth alone.
    pairs = [
        ("exp 16M f32", lambda: kiln.ops.exp(x), lambda: np.exp(x)),
        ("body exp 16M f32", launch(exp_body), lambda: np.exp(x)),
        ("rms_norm 4096x4096 f32", lambda: kiln.ops.rms_norm(square, w, 1e-5), np_rms_norm),
        ("softmax 4096x4096 f32", lambda: kiln.ops.softmax(square), np_softmax),
        ("body seed rms_norm 4096x4096 f32", rows_of(seed_norm, w), np_rms_norm),
        ("body seed softmax 4096x4096 f32", rows_of(seed_softmax), np_softmax),
        ("rope 64x2048x128 f32", lambda: kiln.ops.rope(heads, 128, traditional=False, base=10000.0, scale=1.0,
                                                       offset=0), np_rope),
        ("body copy 16M f32", launch(copy_body), lambda: x.copy()),
    ]
    # (reference, rtol, atol): rope's angles reach 2047 rad, where float32 angles differ by ~1e-4.
    checks = [(np.exp(x), 2e-6, 1e-30), (np.exp(x), 2e-6, 1e-30), (np_rms_norm(), 1e-5, 1e-30),
              (np_softmax(), 1e-5, 1e-30), (np_rms_norm(), 1e-5, 1e-30), (np_softmax(), 1e-5, 1e-30),
              (np_rope(), 1e-3, 1e-3), (x, 0, 0)]
    for (name, k, _), (want, rtol, atol) in zip(pairs, checks):
        got = np.asarray(k()).reshape(want.shape)
        assert np.allclose(got, want, rtol=rtol, atol=atol), f"{name}: kiln's result differs from NumPy's"
    rows = []
    for name, k, ref in pairs:
        rows += [("kiln " + name, k), ("numpy " + name, ref)]
    rows.append(("numpy copyto 64 MiB (bandwidth)", lambda: np.copyto(dst, x)))
    times = {name: [] for name, _ in rows}
    for _, fn in rows:
        fn()
    for _ in range(args.rounds):
        for name, fn in rows:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    bandwidth = bytes_moved / median["numpy copyto 64 MiB (bandwidth)"]
    print(f"{os.cpu_count()} cores; {args.rounds} rounds taking turns; per call: median (fastest .. slowest) ms, "
          f"GB/s of inputs read and outputs written once; kiln against NumPy and against the copy bandwidth "
          f"({bandwidth / 1e9:.2f} GB/s)")
    for name, _ in rows:
        t = times[name]
        gbs = bytes_moved / median[name]
        line = f"  {name:34} {median[name] * 1e3:8.2f} ({min(t) * 1e3:7.2f} .. {max(t) * 1e3:7.2f})  {gbs / 1e9:6.2f} GB/s"
        if name.startswith("kiln "):
            vs = median[name.replace("kiln ", "numpy ", 1)] / median[name]
            line += f"   {vs:5.2f}x numpy's speed, {gbs / bandwidth * 100:5.1f} % of copy bandwidth"
        print(line)


if __name__ == "__main__":
    main()
