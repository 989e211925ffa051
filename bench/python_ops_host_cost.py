#!/usr/bin/env python3
"""Host time per call of ``kiln.ops`` on small PyTorch CUDA tensors beside PyTorch's own op:
exp and rms_norm of a (4, 4096) bf16 tensor, causal attention of (1, 8, 128, 128) bf16. Each
row is called 200 times back to back (outputs allocated per call) in 100 rounds taking turns,
the GPU drained outside the timed loop; a row reports its median and 10th-percentile round, in
µs per call (for ops this small the host's cost sets the pace).

    python3 bench/python_ops_host_cost.py
"""
import time

import torch
import torch.nn.functional as F

import kiln

dev = "cuda"
x = torch.randn(4, 4096, device=dev, dtype=torch.bfloat16); w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
q = torch.randn(1, 8, 128, 128, device=dev, dtype=torch.bfloat16)
rows = {
 "kiln.ops.exp": lambda: kiln.ops.exp(x), "torch.exp": lambda: torch.exp(x),
 "kiln.ops.rms_norm": lambda: kiln.ops.rms_norm(x, w, 1e-5), "F.rms_norm": lambda: F.rms_norm(x, (4096,), w, 1e-5),
 "kiln.ops.sdpa causal": lambda: kiln.ops.scaled_dot_product_attention(q, q, q, scale=0.088, mask="causal"),
 "F.sdpa causal": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.088),
}
for f in rows.values(): f()
torch.cuda.synchronize()
assert (kiln.ops.exp(x).float() - torch.exp(x).float()).abs().max() < 0.1
res = {n: [] for n in rows}
for r in range(100):
    for n, f in rows.items():
        for _ in range(10): f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200): f()
        res[n].append((time.perf_counter() - t) / 200 * 1e6)
        torch.cuda.synchronize()
for n, v in res.items():
    v.sort(); print(f"  {n:22s} median {v[len(v)//2]:7.2f} us  p10 {v[len(v)//10]:7.2f}")
