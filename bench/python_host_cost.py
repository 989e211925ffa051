#!/usr/bin/env python3
"""kiln from Python on PyTorch CUDA tensors, on one GPU, in one run:

1. Host cost of one cached call: ``kiln.metal_kernel`` on a tiny CUDA tensor beside a PyTorch
   eager op and a Triton kernel launch of the same trivial kernel (``out = x + 1``), and the
   same kiln call given ``stream=`` (which takes the general path, descriptors built in Python). Each is
   called ``--calls`` times back to back (outputs allocated per call, as each framework does)
   and the mean host time per call is reported; the GPU is drained before and after, outside
   the timed loop. The calls take turns for ``--rounds`` rounds (the host's speed drifts), and
   each row's median round is its result. Goal: kiln at or below the eager op, well below
   Triton.
2. Device time of a large elementwise kernel (``exp`` over 64 M elements, float32 / float16 /
   bfloat16) called from Python as ``kiln.ops.exp`` — the same kernel ``kiln bench`` times from
   Rust — with CUDA events and the L2 flushed before each call (bench/peers.py's timer). Give
   ``--kiln-json`` the JSON of ``kiln bench --device cuda --filter exp/ --json kiln.json`` from the
   same machine to print the Rust times beside them: equal times mean no hidden copies or syncs.

Usage (on the GPU machine, with kiln, torch and optionally triton installed):
    kiln bench --device cuda --filter exp/ --json /tmp/kiln-exp.json
    python bench/python_host_cost.py --kiln-json /tmp/kiln-exp.json
"""
import argparse
import json
import os
import sys
import time

import torch

import kiln

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import timed  # noqa: E402  (the peers' timer: events, L2 flushed)

N_ELEM = 64 << 20


def host_cost_us(fn, calls):
    """Mean host microseconds per call of ``fn`` over ``calls`` calls (GPU drained outside)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def takes_cached_path(call) -> bool:
    """Whether ``call`` runs without the general path's Python descriptors."""
    import kiln._kernel

    general = kiln._kernel._Inputs
    used = []

    def spy(*args, **kwargs):
        used.append(True)
        return general(*args, **kwargs)

    kiln._kernel._Inputs = spy
    try:
        call()
    finally:
        kiln._kernel._Inputs = general
    return not used


def triton_add_one():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = i < n
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=mask) + 1.0, mask=mask)

    def call(x):
        out = torch.empty_like(x)
        add_one[(1,)](x, out, x.numel(), BLOCK=128)
        return out

    return call


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=500, help="calls timed together in one round")
    ap.add_argument("--rounds", type=int, default=200, help="rounds in which the calls take turns")
    ap.add_argument("--kiln-json", help="kiln bench --json output of the exp cases, for the Rust times")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if not kiln.cuda_available():
        sys.exit(f"kiln's CUDA backend is unavailable: {kiln.cuda_status()}")
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(device)}; kiln {kiln.__version__}; torch {torch.__version__}")

    x = torch.randn(1, device=device)
    kernel = kiln.metal_kernel("add_one", ["x"], ["out"], "uint i = thread_position_in_grid.x; out[i] = x[i] + 1.0f;")

    def kiln_call():
        return kernel(inputs=[x], output_shapes=[(1,)], output_dtypes=[torch.float32], grid=(1, 1, 1),
                      threadgroup=(32, 1, 1))

    (check,) = kiln_call()
    assert torch.equal(check, x + 1), "kiln's add_one is wrong"
    print(f"kiln's call takes the cached path: {takes_cached_path(kiln_call)}")
    results = {"host_us": {}, "device_ms": {}}
    def kiln_general_call():
        # `stream=` takes the general path (Python descriptors), for comparison in the same run.
        return kernel(inputs=[x], output_shapes=[(1,)], output_dtypes=[torch.float32], grid=(1, 1, 1),
                      threadgroup=(32, 1, 1), stream=torch.cuda.current_stream())

    assert torch.equal(kiln_general_call()[0], x + 1), "kiln's add_one is wrong on the general path"
    rows = [("kiln.metal_kernel (cached call)", kiln_call), ("kiln.metal_kernel (stream=: general path)", kiln_general_call),
            ("torch eager x + 1", lambda: x + 1)]
    triton_call = triton_add_one()
    if triton_call is not None:
        assert torch.equal(triton_call(x), x + 1)
        rows.append(("triton launch", lambda: triton_call(x)))
    else:
        print("triton is not installed: no Triton row")
    print(f"\nhost cost of one call, mean over {args.calls} calls, {args.rounds} rounds taking turns:")
    rounds = {name: [] for name, _ in rows}
    for _ in range(args.rounds):
        for name, fn in rows:
            rounds[name].append(host_cost_us(fn, args.calls))
    eager = rows[2][0]
    for name, _ in rows:
        times = sorted(rounds[name])
        us, p10 = times[len(times) // 2], times[len(times) // 10]
        ratios = sorted(r / e for r, e in zip(rounds[name], rounds[eager]))
        ratio = ratios[len(ratios) // 2]
        results["host_us"][name] = us
        results.setdefault("host_us_p10", {})[name] = p10
        results.setdefault("ratio_to_eager", {})[name] = ratio
        results.setdefault("host_us_rounds", {})[name] = rounds[name]
        print(f"  {name:42s} median {us:6.2f} us   p10 {p10:6.2f} us   / torch eager (same round, median) {ratio:.3f}")

    rust = {}
    if args.kiln_json:
        with open(args.kiln_json) as f:
            data = json.load(f)
        for report in data if isinstance(data, list) else [data]:
            for case in report.get("cases", []):
                rust[case["id"]] = case.get("median_ms")
    print(f"\ndevice time of exp over {N_ELEM} elements (median, L2 flushed):")
    for dtype in ("float32", "float16", "bfloat16"):
        t = (torch.rand(N_ELEM, device=device) * 8 - 4).to(getattr(torch, dtype))
        out = kiln.ops.exp(t)
        err = float(((out.double() - t.double().exp()).norm() / t.double().exp().norm()))
        ms = timed(lambda: kiln.ops.exp(t))
        case_id = f"exp/{N_ELEM}/{dtype}"
        results["device_ms"][case_id] = ms
        beside = f"   kiln bench (Rust) {rust[case_id]:.4f} ms -> ratio {ms / rust[case_id]:.3f}" if rust.get(case_id) else ""
        print(f"  {case_id:28s} python {ms:.4f} ms (rel. L2 error {err:.1e}){beside}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
