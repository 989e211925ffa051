#!/usr/bin/env python3
"""Attention prefill in kernel cycles at locked base clocks: kiln's warpgroup prefill
(``kiln.ops.scaled_dot_product_attention`` on PyTorch CUDA tensors) and cuDNN's (PyTorch's SDPA
under ``sdpa_kernel(CUDNN_ATTENTION)``) on the same inputs, the anchor shapes (B4 H32 T4096 bf16,
D = 128 and 64, full and causal), each launched ``--launches`` times under Nsight Compute
(``ncu --clock-control base --metrics sm__cycles_elapsed.max``). A kernel's cycle count does not
move with the GPU's clock, so the launches of one build agree to a fraction of a percent where
timings at boost clocks move by percents between rounds (power and temperature); it measures
the kernels' design, not the energy a call takes (at boost clocks a sustained run can be held by
the power cap, see bench/results/h100.md). Prints each shape's median cycles and the ratio
cuDNN / kiln (above 1: kiln takes fewer cycles).

Usage (on the GPU machine, with kiln, torch and ncu):
    python bench/attention_cycles.py [--launches 3] [--json out.json]
"""
import argparse
import csv
import io
import json
import math
import os
import statistics
import subprocess
import sys

# (B, H, T, D, causal): the anchor shapes (ANCHORS.md), bf16.
SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 32, 4096, 64, False), (4, 32, 4096, 64, True)]
SIDES = {"kiln": "prefill_wgmma", "cudnn": "cudnn"}


def launch(side, launches):
    """Runs `side`'s kernel `launches` times on each shape (what ncu profiles)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import kiln

    for b, h, t, d, causal in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(7)
        q, k, v = (torch.rand((b, h, t, d), device="cuda", generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
                   for _ in range(3))
        scale = 1.0 / math.sqrt(d)
        for _ in range(launches):
            if side == "kiln":
                kiln.ops.scaled_dot_product_attention(q, k, v, scale=scale, mask="causal" if causal else None)
            else:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        torch.cuda.synchronize()
        del q, k, v


def cycles(side, launches):
    """The cycles of each of `side`'s kernel launches, in launch order, from ncu's CSV."""
    cmd = ["ncu", "--clock-control", "base", "--metrics", "sm__cycles_elapsed.max", "-k", f"regex:{SIDES[side]}",
           "--csv", sys.executable, os.path.abspath(__file__), "--child", side, "--launches", str(launches)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("ncu (Nsight Compute) is not on PATH: it comes with the CUDA toolkit, in its bin folder")
    rows = [r for r in csv.reader(io.StringIO(run.stdout)) if len(r) > 3]
    if not rows or "Metric Value" not in rows[0]:
        sys.exit(f"ncu printed no metrics for {side} (exit {run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    value = rows[0].index("Metric Value")
    out = [float(r[value].replace(",", "")) for r in rows[1:]]
    if len(out) != len(SHAPES) * launches:
        sys.exit(f"{side}: expected {len(SHAPES) * launches} launches, ncu measured {len(out)}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", choices=list(SIDES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        launch(args.child, args.launches)
        return
    measured = {side: cycles(side, args.launches) for side in SIDES}
    results = []
    print(f"{'shape':44s} {'kiln kcycles':>14s} {'cuDNN kcycles':>14s} {'cuDNN / kiln':>13s}")
    for i, (b, h, t, d, causal) in enumerate(SHAPES):
        case = f"attention{'_causal' if causal else ''}/{b}x{h}x{t}x{t}x{d}/bfloat16"
        per = {side: measured[side][i * args.launches:(i + 1) * args.launches] for side in SIDES}
        med = {side: statistics.median(c) for side, c in per.items()}
        ratio = med["cudnn"] / med["kiln"]
        print(f"{case:44s} {med['kiln'] / 1e3:14.0f} {med['cudnn'] / 1e3:14.0f} {ratio:13.3f}")
        results.append({"case": case, "cycles": per, "ratio": ratio})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
