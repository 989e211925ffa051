#!/usr/bin/env python3
"""The kiln benchmark cases run by peers on the same GPU: PyTorch eager, torch.compile, and
FLA (Triton) where installed. Writes a JSON list of reports (one per implementation) in the
format of `kiln bench --json`; `kiln bench --compare peers.json` prints kiln/peer ratios.

Timing: CUDA events around each call, the L2 flushed before each (its persisting lines reset to
normal, as kiln's timer does, then a write to a buffer four times its size), median of many
runs. Inputs are random (never all zeros). Case ids (op/shape/dtype) match
crates/kiln/src/bench/cases.rs.
"""
import argparse
import ctypes
import json
import math
import time

import torch
import torch.nn.functional as F

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
N_ELEM = 64 << 20
ROWS = 16384


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


def cases():
    out = []
    for dt in ["float32", "float16", "bfloat16"]:
        for op, (f, fl) in UNARY.items():
            def make(f=f, dt=dt):
                x = rand(N_ELEM, dt, -4, 4)
                ref = f(x[::64].double())
                return x, (lambda g: (lambda: g(x))), f, (lambda o: rel_l2(o[::64], ref))
            out.append((f"{op}/{N_ELEM}/{dt}", 2 * N_ELEM * DT[dt].itemsize, fl * N_ELEM, make, dt, True))
    for dt in ["bfloat16", "float32"]:
        for d in [1024, 4096, 8192]:
            def make(d=d, dt=dt):
                x, w = rand((ROWS, d), dt, -2, 2), rand(d, dt, 0.5, 1.5)
                ref = rms_norm(x[::64].double(), w.double())
                return None, (lambda g: (lambda: g(x, w))), rms_norm, (lambda o: rel_l2(o[::64], ref))
            out.append((f"rms_norm/{ROWS}x{d}/{dt}", (2 * ROWS * d + d) * DT[dt].itemsize, 4 * ROWS * d, make, dt, True))
        for d in [1024, 4096, 8192]:
            def make(d=d, dt=dt):
                x, r, w = rand((ROWS, d), dt, -2, 2), rand((ROWS, d), dt, -2, 2), rand(d, dt, 0.5, 1.5)
                ref = rms_norm(x[::64].double() + r[::64].double(), w.double())
                return None, (lambda g: (lambda: g(x, r, w))), residual_rms_norm, (lambda o: rel_l2(o[0][::64], ref))
            out.append((f"residual_rms_norm/{ROWS}x{d}/{dt}", (4 * ROWS * d + d) * DT[dt].itemsize, 5 * ROWS * d, make, dt, True))
    for dt in ["float32", "bfloat16"]:
        for d in [1024, 4096, 32768]:
            def make(d=d, dt=dt):
                x = rand((ROWS, d), dt, -4, 4)
                ref = torch.softmax(x[::64].double(), -1)
                f = lambda x: torch.softmax(x, -1)
                return None, (lambda g: (lambda: g(x))), f, (lambda o: rel_l2(o[::64], ref))
            out.append((f"softmax/{ROWS}x{d}/{dt}", 2 * ROWS * d * DT[dt].itemsize, 4 * ROWS * d, make, dt, True))

    def make_rope():
        x = rand((32, 32, 1024, 128), "bfloat16", -2, 2)
        ref = rope(x[:1].double())
        return None, (lambda g: (lambda: g(x))), rope, (lambda o: rel_l2(o[:1], ref))
    out.append(("rope/32x32x1024x128/bfloat16", 2 * (32 * 32 * 1024 * 128) * 2, 6 * 32 * 32 * 1024 * 64, make_rope, "bfloat16", True))

    for name, (b, h, tq, tk, d, causal) in [
        ("attention_causal", (4, 32, 4096, 4096, 128, True)),
        ("attention", (4, 32, 4096, 4096, 128, False)),
        ("attention_causal", (4, 32, 4096, 4096, 64, True)),
        ("attention", (4, 32, 4096, 4096, 64, False)),
        ("attention_decode", (32, 32, 1, 8192, 128, False)),
    ]:
        def make(b=b, h=h, tq=tq, tk=tk, d=d, causal=causal):
            q, k, v = rand((b, h, tq, d), "bfloat16"), rand((b, h, tk, d), "bfloat16"), rand((b, h, tk, d), "bfloat16")
            f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ref = F.scaled_dot_product_attention(q[:1, :1].float(), k[:1, :1].float(), v[:1, :1].float(), is_causal=causal)
            return None, (lambda g: (lambda: g(q, k, v))), f, (lambda o: rel_l2(o[:1, :1], ref))
        flops = 4 * b * h * tq * tk * d * (0.5 if causal else 1.0)
        nbytes = 2 * (2 * b * h * tq * d + 2 * b * h * tk * d)
        out.append((f"{name}/{b}x{h}x{tq}x{tk}x{d}/bfloat16", nbytes, flops, make, "bfloat16", False))

    def make_gs(vjp=False):
        x = rand((8, 64, 1024, 1024), "float32")  # NCHW for torch
        grid = rand((8, 256, 256, 2), "float32")
        if not vjp:
            f = lambda x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=False)
            ref = f(x[:1].double(), grid[:1].double())
            return None, (lambda g: (lambda: g(x, grid))), f, (lambda o: rel_l2(o[:1], ref))
        xg, gg = x.clone().requires_grad_(), grid.clone().requires_grad_()
        y = F.grid_sample(xg, gg, align_corners=False)
        cot = torch.randn_like(y)
        f = lambda: torch.autograd.grad(y, (xg, gg), cot, retain_graph=True)
        return None, (lambda g: f), None, (lambda o: 0.0)
    gs = "8x1024x1024x64+8x256x256x2"
    out.append((f"grid_sample/{gs}/float32", 4 * (8 * 1024 * 1024 * 64 + 8 * 256 * 256 * 2 + 8 * 256 * 256 * 64), 8 * 8 * 256 * 256 * 64, make_gs, "float32", False))
    out.append((f"grid_sample_vjp/{gs}/float32", 4 * (2 * 8 * 1024 * 1024 * 64 + 2 * 8 * 256 * 256 * 2 + 8 * 256 * 256 * 64), 16 * 8 * 256 * 256 * 64, lambda: make_gs(True), "float32", False))

    def make_scatter():
        vals = rand(N_ELEM, "float32")
        idx = torch.randint(0, 32768, (N_ELEM,), device="cuda")
        f = lambda v, i: torch.zeros(32768, device="cuda").index_add_(0, i, v)
        return None, (lambda g: (lambda: g(vals, idx))), f, (lambda o: 0.0)
    out.append((f"scatter_add/{N_ELEM}x32768/float32", N_ELEM * 8 + 32768 * 4, N_ELEM, make_scatter, "float32", False))

    for b, n in [(65536, 16), (8192, 64), (64, 1024)]:
        def make(b=b, n=n):
            a = torch.randn(b, n, n, device="cuda")
            spd = a @ a.transpose(-1, -2) / n + torch.eye(n, device="cuda")
            f = lambda m: torch.linalg.cholesky_ex(m)
            return None, (lambda g: (lambda: g(spd))), f, (lambda o: 0.0)
        out.append((f"cholesky/{b}x{n}x{n}/float32", 2 * b * n * n * 4, b * n ** 3 / 3, make, "float32", False))
    for b, n in [(8192, 64), (16, 1024)]:
        def make(b=b, n=n):
            a = torch.randn(b, n, n, device="cuda")
            f = lambda m: torch.linalg.qr(m)
            return None, (lambda g: (lambda: g(a))), f, (lambda o: 0.0)
        out.append((f"qr/{b}x{n}x{n}/float32", 3 * b * n * n * 4, b * 4 * n ** 3 / 3, make, "float32", False))
    return out


GDN_SHAPE = (8, 4096, 16, 128, 32, 64)  # B, T, Hg, K, H, chunk
GDN_ID = "gdn_kkt/{}x{}x{}x{}/bfloat16".format(*GDN_SHAPE[:4])


def gdn_case():
    """GDN chunk_scaled_dot_kkt through FLA when installed, else a torch eager reference."""
    B, T, Hg, K, H, C = GDN_SHAPE
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
    flops = 2 * B * H * T * C / 2 * K
    nbytes = B * T * Hg * K * 2 + 2 * B * T * H * 4 + B * T * H * C * 4
    return GDN_ID, nbytes, flops, impls


def report(impl, dev, results):
    return {"implementation": impl, "device_name": dev, "device": "cuda:0", "commit": "", "copy_gbs": results["copy_gbs"], "cases": results["cases"]}


def main():
    ap = argparse.ArgumentParser()
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

    for cid, nbytes, flops, make, dt, compile_too in cases():
        if not selected(cid):
            continue
        _, bind, f, check = make()
        tol = TOL.get(dt, 1e-5)
        if f is None:
            record("torch-eager", cid, nbytes, flops, dt, bind(None), check, tol)
            continue
        record("torch-eager", cid, nbytes, flops, dt, bind(f), check, tol)
        if compile_too and not args.no_compile:
            record("torch-compile", cid, nbytes, flops, dt, bind(torch.compile(f, dynamic=False)), check, tol)
    if selected(GDN_ID):
        cid, nbytes, flops, impls = gdn_case()
        for impl, fn in impls.items():
            record(impl, cid, nbytes, flops, "bfloat16", fn, lambda o: 0.0, 1e-5)
    reports = [report(impl, dev, {"copy_gbs": copy_gbs, "cases": cs}) for impl, cs in res.items() if cs]
    with open(args.out, "w") as fh:
        json.dump(reports, fh, indent=1)


if __name__ == "__main__":
    main()
