#!/usr/bin/env python3
"""Attention prefill from one process: kiln (``kiln.ops.scaled_dot_product_attention`` on
PyTorch CUDA tensors) and PyTorch's SDPA backends taking turns on the same inputs, round after
round, so both see the GPU in the same state (its clocks drift with power and temperature
between processes and minutes apart). Each time is bench/peers.py's: CUDA events, the L2 flushed
before each call, the median of the calls of a round. Prints each round's times and ratio
(PyTorch's best backend over kiln: above 1, kiln is faster) and the median of each side. Each
time starts from an idle GPU (the timer waits for queued work before its flush), so a call's
host time beyond the flush shows in it; the host milliseconds per call while 20 calls are
queued back to back, and the wall milliseconds per call until they are done, are printed too.

Usage (on the GPU machine, with kiln and torch installed):
    python bench/attention_turns.py [--rounds 5] [--json out.json]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kiln

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import rel_l2, timed  # noqa: E402  (the peers' timer: events, L2 flushed)

# (B, H, T, D, causal): the anchor shapes (ANCHORS.md), bf16.
SHAPES = [(4, 32, 4096, 128, True), (4, 32, 4096, 128, False), (4, 32, 4096, 64, True), (4, 32, 4096, 64, False)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def flops(b, h, t, d, causal):
    whole = 4 * b * h * t * t * d
    return whole / 2 if causal else whole


def queued_ms(fn, calls=20):
    """(host ms per call while ``calls`` calls are queued back to back, wall ms per call until
    the GPU has run them all)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    queued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return (queued - start) / calls * 1e3, (done - start) / calls * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time-per-case", type=float, default=0.3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}; kiln {kiln.__version__}; torch {torch.__version__}; "
          f"cuDNN {torch.backends.cudnn.version()}")
    results = []
    for b, h, t, d, causal in SHAPES:
        case = f"attention{'_causal' if causal else ''}/{b}x{h}x{t}x{t}x{d}/bfloat16"
        gen = torch.Generator(device="cuda").manual_seed(7)
        q, k, v = (torch.rand((b, h, t, d), device="cuda", generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
                   for _ in range(3))
        scale = 1.0 / math.sqrt(d)
        mask = "causal" if causal else None
        sides = {"kiln": lambda: kiln.ops.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)}
        for name, backend in BACKENDS.items():
            def run(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            sides[name] = run
        ref = F.scaled_dot_product_attention(q[:1, :1].float(), k[:1, :1].float(), v[:1, :1].float(),
                                             is_causal=causal, scale=scale)
        usable = {}
        for name, fn in sides.items():
            try:
                err = rel_l2(fn()[:1, :1], ref)
            except RuntimeError as e:  # a backend PyTorch does not offer for this shape
                print(f"  {case}: {name} unavailable ({str(e).splitlines()[0]})")
                continue
            if not err < 8e-3:
                sys.exit(f"{case}: {name} disagrees with the f32 reference (rel. L2 {err:.2e})")
            usable[name] = fn
        queued = {name: queued_ms(fn) for name, fn in usable.items()}
        rounds = {name: [] for name in usable}
        for _ in range(args.rounds):
            for name, fn in usable.items():
                rounds[name].append(timed(fn, time_per_case=args.time_per_case))
        peers = [n for n in usable if n != "kiln"]
        best = [min(rounds[n][i] for n in peers) for i in range(args.rounds)]
        ratios = [p / k for p, k in zip(best, rounds["kiln"])]
        med = {n: sorted(r)[len(r) // 2] for n, r in rounds.items()}
        print(f"{case}")
        for name, r in rounds.items():
            tf = flops(b, h, t, d, causal) / (med[name] * 1e-3) / 1e12
            print(f"  {name:6s} median {med[name]:.4f} ms ({tf:.0f} TFLOP/s)  rounds " + " ".join(f"{x:.4f}" for x in r)
                  + f"  | back to back: host {queued[name][0]:.4f} ms/call, wall {queued[name][1]:.4f} ms/call")
        print(f"  best peer / kiln per round: " + " ".join(f"{x:.3f}" for x in ratios)
              + f"   (min {min(ratios):.3f}, median {sorted(ratios)[len(ratios) // 2]:.3f})")
        results.append({"case": case, "rounds_ms": rounds, "ratio_per_round": ratios, "queued_ms": queued})
        del q, k, v
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
