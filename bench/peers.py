#!/usr/bin/env python3
"""The kiln benchmark cases run by peers on the same GPU: PyTorch eager, torch.compile, and
FLA (Triton) where installed. Writes a JSON list of reports (one per implementation) in the
format of `kiln bench --json`; `kiln bench --compare peers.json` prints kiln/peer ratios.

Timing: CUDA events around each call, the L2 flushed before each (its persisting lines reset to
normal, as kiln's timer does, then a write to a buffer four times its size), median of many
runs. Inputs are random (never all zeros). The cases (ids op/shape/dtype, sizes, bytes and FLOPs)
are the ones `kiln bench --list-json` prints from the tools' table of kiln's registry ops
(`kiln_tools::op_table`).
"""
import argparse
import ctypes
import json
import math
import time

import torch
import torch.nn.functional as F

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _driver_reset():
    """The driver's cuCtxResetPersistingL2Cache, or None where libcuda cannot be loaded."""
    try:
        return ctypes.CDLL("libcuda.so.1").cuCtxResetPersistingL2Cache
    except OSError:
        return None


_RESET_PERSISTING = _driver_reset()
CUDA_ERROR_NOT_SUPPORTED = 801


def reset_persisting_lines():
    """Waits for queued work, then turns the L2's persisting (evict-last) lines into normal ones,
    which the flush can evict (they survive a plain write of four times the L2)."""
    torch.cuda.synchronize()
    if _RESET_PERSISTING is not None:
        rc = _RESET_PERSISTING()
        if rc not in (0, CUDA_ERROR_NOT_SUPPORTED):
            raise RuntimeError(f"cuCtxResetPersistingL2Cache failed: CUresult {rc}")


def timed(fn, time_per_case=0.25, min_reps=10, max_reps=200):
    """Median milliseconds of fn() with the L2 flushed before each call."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device="cuda")

    def run(reps):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for s, e in ev:
            reset_persisting_lines()
            flush.fill_(0x5A)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return sorted(s.elapsed_time(e) for s, e in ev)

    for _ in range(3):
        fn()
    first = run(3)[1]
    reps = int(min(max(time_per_case * 1e3 / max(first, 1e-3), min_reps), max_reps))
    t = run(reps)
    return t[len(t) // 2]


def rel_l2(out, ref):
    out, ref = out.double().flatten(), ref.double().flatten()
    if torch.isnan(out).any():
        return math.inf
    return float((out - ref).norm() / ref.norm())


TOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


def rand(shape, dtype, lo=-1.0, hi=1.0):
    return (torch.rand(shape, device="cuda", dtype=torch.float32) * (hi - lo) + lo).to(DT.get(dtype, dtype))


# Each case: id, bytes, flops, make() -> (fn(impl) -> callable, check(out) -> error, tolerance).
def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


UNARY = {"exp": (torch.exp, 1), "silu": (F.silu, 4), "gelu_tanh": (gelu_tanh, 9)}


def rms_norm(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def residual_rms_norm(x, r, w, eps=1e-5):
    h = x + r
    return rms_norm(h, w, eps), h


def rope(x, base=1e4):
    # half-split pairs (i, i + D/2), position = axis 2
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d // 2, device=x.device, dtype=torch.float32) * 2 / d)
    ang = torch.arange(x.shape[2], device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    xf = x.float()
    a, b = xf[..., : d // 2], xf[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1).to(x.dtype)


def unary_case(case, dims, dt):
    (n,) = dims
    f = UNARY[case][0]

    def make():
        x = rand(n, dt, -4, 4)
        ref = f(x[::64].double())
        return x, (lambda g: (lambda: g(x))), f, (lambda o: rel_l2(o[::64], ref))
    return make


def rms_norm_case(case, dims, dt):
    rows, d = dims

    def make():
        x, w = rand((rows, d), dt, -2, 2), rand(d, dt, 0.5, 1.5)
        ref = rms_norm(x[::64].double(), w.double())
        return None, (lambda g: (lambda: g(x, w))), rms_norm, (lambda o: rel_l2(o[::64], ref))
    return make


def residual_rms_norm_case(case, dims, dt):
    rows, d = dims

    def make():
        x, r, w = rand((rows, d), dt, -2, 2), rand((rows, d), dt, -2, 2), rand(d, dt, 0.5, 1.5)
        ref = rms_norm(x[::64].double() + r[::64].double(), w.double())
        return None, (lambda g: (lambda: g(x, r, w))), residual_rms_norm, (lambda o: rel_l2(o[0][::64], ref))
    return make


def softmax_case(case, dims, dt):
    rows, d = dims

    def make():
        x = rand((rows, d), dt, -4, 4)
        ref = torch.softmax(x[::64].double(), -1)
        f = lambda x: torch.softmax(x, -1)
        return None, (lambda g: (lambda: g(x))), f, (lambda o: rel_l2(o[::64], ref))
    return make


def rope_case(case, dims, dt):
    def make():
        x = rand(tuple(dims), dt, -2, 2)
        ref = rope(x[:1].double())
        return None, (lambda g: (lambda: g(x))), rope, (lambda o: rel_l2(o[:1], ref))
    return make


def attention_case(case, dims, dt):
    b, h, hkv, tq, tk, d = dims
    causal = case.endswith("_causal")

    def make():
        q, k, v = rand((b, h, tq, d), dt), rand((b, hkv, tk, d), dt), rand((b, hkv, tk, d), dt)
        f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ref = F.scaled_dot_product_attention(q[:1, :1].float(), k[:1, :1].float(), v[:1, :1].float(), is_causal=causal)
        return None, (lambda g: (lambda: g(q, k, v))), f, (lambda o: rel_l2(o[:1, :1], ref))
    return make


def grid_sample_case(vjp):
    def case(case, dims, dt):
        b, h, w, c, gh, gw = dims

        def make():
            x = rand((b, c, h, w), dt)  # NCHW for torch
            grid = rand((b, gh, gw, 2), dt)
            if not vjp:
                f = lambda x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=False)
                ref = f(x[:1].double(), grid[:1].double())
                return None, (lambda g: (lambda: g(x, grid))), f, (lambda o: rel_l2(o[:1], ref))
            xg, gg = x.clone().requires_grad_(), grid.clone().requires_grad_()
            y = F.grid_sample(xg, gg, align_corners=False)
            cot = torch.randn_like(y)
            f = lambda: torch.autograd.grad(y, (xg, gg), cot, retain_graph=True)
            return None, (lambda g: f), None, (lambda o: 0.0)
        return make
    return case


def scatter_add_case(case, dims, dt):
    n, m, bins = dims

    def make():
        vals = rand((n, m) if m > 1 else n, dt)
        idx = torch.randint(0, bins, (n,), device="cuda")
        f = lambda v, i: torch.zeros((bins, m) if m > 1 else bins, device="cuda").index_add_(0, i, v)
        return None, (lambda g: (lambda: g(vals, idx))), f, (lambda o: 0.0)
    return make


def cholesky_case(case, dims, dt):
    b, n = dims

    def make():
        a = torch.randn(b, n, n, device="cuda")
        spd = a @ a.transpose(-1, -2) / n + torch.eye(n, device="cuda")
        f = lambda m: torch.linalg.cholesky_ex(m)
        return None, (lambda g: (lambda: g(spd))), f, (lambda o: 0.0)
    return make


def qr_case(case, dims, dt):
    b, m, n = dims

    def make():
        a = torch.randn(b, m, n, device="cuda")
        f = lambda m: torch.linalg.qr(m)
        return None, (lambda g: (lambda: g(a))), f, (lambda o: 0.0)
    return make


# The torch version of each op of kiln's registry (`kiln bench --list-json` names the op, the
# case, its sizes and dtype), and whether torch.compile is timed too. The GDN op has its own
# path (FLA where installed): `gdn_case`.
MAKERS = {
    "exp": (unary_case, True),
    "silu": (unary_case, True),
    "gelu": (unary_case, True),
    "rms_norm": (rms_norm_case, True),
    "residual_rms_norm": (residual_rms_norm_case, True),
    "softmax": (softmax_case, True),
    "rope": (rope_case, True),
    "scaled_dot_product_attention": (attention_case, False),
    "grid_sample": (grid_sample_case(False), False),
    "grid_sample_vjp": (grid_sample_case(True), False),
    "scatter_add": (scatter_add_case, False),
    "cholesky": (cholesky_case, False),
    "qr": (qr_case, False),
}
GDN_OP = "gdn_chunk_scaled_dot_kkt"
GDN_CHUNK = 64


def cases(listed):
    """Each listed case as (id, bytes, flops, make, dtype, compile_too); bytes and FLOPs are kiln's."""
    out = []
    for c in listed:
        if c["op"] == GDN_OP:
            continue
        if c["op"] not in MAKERS:
            print(f"no peer for {c['id']}", flush=True)
            continue
        maker, compile_too = MAKERS[c["op"]]
        out.append((c["id"], c["bytes"], c["flops"], maker(c["case"], c["dims"], c["dtype"]), c["dtype"], compile_too))
    return out


def gdn_case(case):
    """GDN chunk_scaled_dot_kkt through FLA when installed, else a torch eager reference."""
    B, T, Hg, H, K = case["dims"]
    C = GDN_CHUNK
    k = rand((B, T, Hg, K), "bfloat16")
    beta = torch.rand((B, T, H), device="cuda")
    g = -torch.rand((B, T, H), device="cuda").reshape(B, T // C, C, H).cumsum(2).reshape(B, T, H)
    impls = {}
    try:
        from fla.ops.common.chunk_scaled_dot_kkt import chunk_scaled_dot_kkt_fwd
        impls["fla"] = lambda: chunk_scaled_dot_kkt_fwd(k=k, beta=beta, g=g, chunk_size=C, output_dtype=torch.float32)
    except Exception:
        pass

    def eager():
        kk = k.float().repeat_interleave(H // Hg, 2).reshape(B, T // C, C, H, K)
        kb = (kk * beta.reshape(B, T // C, C, H, 1)).to(torch.bfloat16).float()
        a = torch.einsum("bnihk,bnjhk->bnhij", kb, kk)
        gc = g.reshape(B, T // C, C, H).permute(0, 1, 3, 2)
        a = a * torch.exp(gc[..., :, None] - gc[..., None, :])
        a = a.tril(-1)
        return a.permute(0, 1, 3, 2, 4).reshape(B, T, H, C)
    impls["torch-eager"] = eager
    return impls


def report(impl, dev, results):
    return {"implementation": impl, "device_name": dev, "device": "cuda:0", "commit": "", "copy_gbs": results["copy_gbs"], "cases": results["cases"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", required=True, help="the case list `kiln bench --list-json` prints (JSON)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--filter", default="", help="run the cases whose id contains this text (several: comma-separated)")
    ap.add_argument("--time-per-case", type=float, default=0.25)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name(0)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(0x3C)
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), args.time_per_case)
    copy_gbs = 2 * (1 << 30) / (copy_ms * 1e-3) / 1e9
    del src, dst
    copy_case = {"id": f"copy/{1 << 30}/uint8", "op": "copy", "shape": str(1 << 30), "dtype": "uint8", "bytes": 2.0 * (1 << 30), "flops": 0.0,
                 "median_ms": copy_ms, "error": 0.0, "tolerance": 0.0, "status": "ok", "note": "torch copy_"}
    res = {"torch-eager": [dict(copy_case)], "torch-compile": []}
    print(f"{dev}: copy {copy_ms:.4f} ms = {copy_gbs:.0f} GB/s", flush=True)

    def selected(cid):
        return any(f in cid for f in args.filter.split(","))

    def record(impl, cid, nbytes, flops, dt, fn, check, tol):
        op, shape, _ = cid.split("/")
        entry = {"id": cid, "op": op, "shape": shape, "dtype": dt, "bytes": float(nbytes), "flops": float(flops),
                 "median_ms": None, "error": None, "tolerance": tol, "status": "failed", "note": impl}
        try:
            t0 = time.time()
            o = fn()
            err = check(o)
            entry["error"] = err
            # A peer is the baseline: it is timed either way, and marked wrong past the tolerance.
            entry["median_ms"] = timed(fn, args.time_per_case)
            entry["status"] = "ok" if err <= tol else "wrong"
            print(f"{impl:14} {cid:52} {entry['median_ms'] or float('nan'):10.4f} ms  err {err:.1e}  ({time.time() - t0:.1f}s)", flush=True)
        except Exception as e:  # a peer that cannot run a case is reported, not fatal
            entry["note"] = f"{impl}: {type(e).__name__}: {str(e)[:200]}"
            print(f"{impl:14} {cid:52} failed: {entry['note']}", flush=True)
        res.setdefault(impl, []).append(entry)
        torch.cuda.empty_cache()

    with open(args.cases) as fh:
        listed = [c for c in json.load(fh) if selected(c["id"])]
    for cid, nbytes, flops, make, dt, compile_too in cases(listed):
        _, bind, f, check = make()
        tol = TOL.get(dt, 1e-5)
        if f is None:
            record("torch-eager", cid, nbytes, flops, dt, bind(None), check, tol)
            continue
        record("torch-eager", cid, nbytes, flops, dt, bind(f), check, tol)
        if compile_too and not args.no_compile:
            record("torch-compile", cid, nbytes, flops, dt, bind(torch.compile(f, dynamic=False)), check, tol)
    for c in listed:
        if c["op"] == GDN_OP:
            for impl, fn in gdn_case(c).items():
                record(impl, c["id"], c["bytes"], c["flops"], c["dtype"], fn, lambda o: 0.0, 1e-5)
    reports = [report(impl, dev, {"copy_gbs": copy_gbs, "cases": cs}) for impl, cs in res.items() if cs]
    with open(args.out, "w") as fh:
        json.dump(reports, fh, indent=1)


if __name__ == "__main__":
    main()
