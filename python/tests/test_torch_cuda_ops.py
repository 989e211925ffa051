"""kiln.ops of several launches (attention, grid_sample and its VJP, cholesky, qr, GDN's
chunk_scaled_dot_kkt) on PyTorch CUDA tensors: every launch on PyTorch's current stream (here a
non-default one, with the inputs produced on it just before), outputs allocated by PyTorch on
the inputs' device, checked against float64 references computed by PyTorch. Need a GPU."""

import os

import numpy as np
import pytest

import kiln
from conftest import assert_close

if os.environ.get("KILN_REQUIRE_BACKEND") == "cuda":
    import torch  # a run that must reach CUDA fails without PyTorch
else:
    torch = pytest.importorskip("torch")

pytestmark = pytest.mark.cuda
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def name(dtype):
    return str(dtype).rpartition(".")[2]


def ref(t):
    return t.detach().to("cpu", torch.float64).numpy()


def on_side_stream(make_inputs, op):
    """Makes the inputs and runs ``op`` on a fresh non-default stream with no wait in between,
    so an op that launched anywhere else would race with the inputs' producers; returns the
    inputs and the outputs once the stream is done."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        inputs = make_inputs()
        outputs = op(*inputs)
    side.synchronize()
    return inputs, outputs


def attention_reference(q, k, v, scale, mask):
    q, k, v = (ref(t) for t in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    tq, tk = s.shape[-2:]
    if isinstance(mask, str):
        s = np.where(np.tril(np.ones((tq, tk), bool), tk - tq), s, -np.inf)
    elif mask is not None:
        s = s + ref(mask)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


# Prefill (Tq = Tk), decode (Tq = 1: a split pass then a combine, two launches with kiln's
# intermediate buffers between them) and grouped heads.
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
@pytest.mark.parametrize("tq,tk", [(33, 33), (1, 700)], ids=["prefill", "decode"])
@pytest.mark.parametrize("mask", [None, "causal", "array"])
def test_scaled_dot_product_attention(dtype, tq, tk, mask):
    def make():
        q = torch.randn(2, 4, tq, 64, device="cuda").to(dtype)
        k = torch.randn(2, 2, tk, 64, device="cuda").to(dtype)
        v = torch.randn(2, 2, tk, 64, device="cuda").to(dtype)
        m = (torch.randn(1, 4, tq, tk, device="cuda") * 2).to(dtype) if mask == "array" else mask
        return q, k, v, m

    (q, k, v, m), out = on_side_stream(
        make, lambda q, k, v, m: kiln.ops.scaled_dot_product_attention(q, k, v, scale=0.125, mask=m))
    assert out.device == q.device and out.dtype == dtype and out.shape == q.shape
    assert_close(ref(out), attention_reference(q, k, v, 0.125, m), name(dtype))


def torch_grid_sample(x, grid):
    """kiln's layout (NHWC) through PyTorch's NCHW grid_sample, in float64."""
    x64 = x.double().permute(0, 3, 1, 2)
    out = torch.nn.functional.grid_sample(x64, grid.double(), mode="bilinear", padding_mode="zeros",
                                          align_corners=False)
    return out.permute(0, 2, 3, 1)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_grid_sample_and_its_vjp(dtype):
    def make():
        x = torch.randn(2, 12, 10, 8, device="cuda").to(dtype)
        grid = (torch.rand(2, 6, 7, 2, device="cuda") * 2.2 - 1.1).to(dtype)
        cot = torch.randn(2, 6, 7, 8, device="cuda").to(dtype)
        return x, grid, cot

    (x, grid, cot), (out, (dx, dg)) = on_side_stream(
        make, lambda x, g, c: (kiln.ops.grid_sample(x, g), kiln.ops.grid_sample_vjp(x, g, c)))
    assert out.device == x.device and out.dtype == dtype and out.shape == (2, 6, 7, 8)
    assert_close(ref(out), ref(torch_grid_sample(x.detach(), grid.detach())), name(dtype))

    x64 = x.detach().double().requires_grad_(True)
    g64 = grid.detach().double().requires_grad_(True)
    torch_grid_sample(x64, g64).backward(cot.double())
    assert dx.dtype == dtype and dg.dtype == dtype and dx.device == x.device
    # The VJP accumulates in float32 and casts once; the grid's gradient of a bilinear sample is
    # piecewise, so half precision inputs get the float16 / bfloat16 tolerance.
    assert_close(ref(dx), ref(x64.grad), name(dtype))
    assert_close(ref(dg), ref(g64.grad), name(dtype))


# One kernel up to 64, kiln's blocked launches above (100: a partial last block; 200: four
# blocks), every one on the side stream, updating PyTorch's output in place.
@pytest.mark.parametrize("n", [8, 33, 64, 100, 200])
def test_cholesky(n):
    def make():
        m = torch.randn(5, n, n, device="cuda")
        return (m @ m.transpose(1, 2) + n * torch.eye(n, device="cuda"),)

    (a,), out = on_side_stream(make, kiln.ops.cholesky)
    assert out.device == a.device and out.dtype == torch.float32 and out.shape == a.shape
    assert_close(ref(out), np.linalg.cholesky(ref(a)), "float32")


@pytest.mark.parametrize("n", [16, 100])
def test_cholesky_names_the_matrix_that_is_not_positive_definite(n):
    m = torch.randn(4, n, n, device="cuda")
    a = m @ m.transpose(1, 2) + n * torch.eye(n, device="cuda")
    a[2, 5, 5] = -100.0
    with pytest.raises(kiln.InvalidArgumentError, match="matrix 2 of the batch is not positive definite"):
        kiln.ops.cholesky(a)


# One kernel up to 64 x 64; blocked above (Q made by the first launch and updated in place by
# later ones, R by the last), square and tall with a partial last panel.
@pytest.mark.parametrize("m,n", [(16, 16), (40, 12), (64, 64), (100, 100), (150, 70)])
def test_qr(m, n):
    (a,), (q, r) = on_side_stream(lambda: (torch.randn(3, m, n, device="cuda"),), kiln.ops.qr)
    assert q.device == a.device and q.shape == (3, m, n) and r.shape == (3, n, n)
    qq, rr = ref(q), ref(r)
    assert_close(qq @ rr, ref(a), "float32")
    assert_close(qq.transpose(0, 2, 1) @ qq, np.broadcast_to(np.eye(n), (3, n, n)), "float32")
    assert np.allclose(np.tril(rr, -1), 0.0)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_gdn_chunk_scaled_dot_kkt(dtype):
    b, t, hg, h, kd, chunk = 2, 150, 2, 4, 64, 64

    def make():
        k = (torch.randn(b, t, hg, kd, device="cuda") * 0.3).to(dtype)
        beta = torch.rand(b, t, h, device="cuda")
        g = -torch.rand(b, t, h, device="cuda").cumsum(1) * 0.05
        return k, beta, g

    (k, beta, g), out = on_side_stream(make, lambda k, beta, g: kiln.ops.gdn_chunk_scaled_dot_kkt(k, beta, g, 64))
    assert out.device == k.device and out.dtype == torch.float32 and out.shape == (b, t, h, chunk)
    kk = np.repeat(ref(k), h // hg, axis=2)  # (b, t, h, kd)
    want = np.zeros((b, t, h, chunk))
    bb, gg = ref(beta), ref(g)
    for row in range(t):
        t0 = row // chunk * chunk
        for col in range(t0, row):
            dot = np.einsum("bhk,bhk->bh", kk[:, row] * bb[:, row, :, None], kk[:, col])
            want[:, row, :, col - t0] = np.exp(gg[:, row] - gg[:, col]) * dot
    assert_close(ref(out), want, name(dtype))


# One-launch row ops on strided CUDA tensors: the inputs are made contiguous by PyTorch on the
# current stream, so the copy is ordered after the inputs' producers on that stream.
def test_row_ops_on_strided_inputs_produced_on_the_current_stream():
    def make():
        base = torch.randn(384, 1000, device="cuda") * 3.0
        return base.t(), torch.randn(384, device="cuda")  # x: 1000 x 384, strided

    (x, w), outs = on_side_stream(
        make, lambda x, w: (kiln.ops.rms_norm(x, w, 1e-5), kiln.ops.softmax(x)))
    norm, soft = outs
    xr, wr = ref(x), ref(w)
    want_norm = xr / np.sqrt((xr * xr).mean(-1, keepdims=True) + 1e-5) * wr
    e = np.exp(xr - xr.max(-1, keepdims=True))
    assert norm.device == x.device and soft.device == x.device
    assert_close(ref(norm), want_norm, "float32")
    assert_close(ref(soft), e / e.sum(-1, keepdims=True), "float32")


def torch_attention_reference(q, k, v, scale, causal):
    """Attention in float64 by PyTorch's matrix products on the GPU (large cases)."""
    s = q.double() @ k.double().transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return ref(torch.softmax(s, -1) @ v.double())


def test_ops_called_back_to_back_on_one_stream_each_get_their_answer():
    """Layers call ops one after another without waiting, often behind long work on the stream:
    each call of the warpgroup prefill (its tensor maps and tile counter are kiln's memory,
    written per call; more tiles than multiprocessors, so the counter matters), of decode and
    of the blocked cholesky and qr must read its own tables and intermediates, never a later
    call's, and must not have them reused while it runs. The stream first spins for a while, so
    every call is queued before any runs. Each prefill reads the previous one's output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    prefill, decode, chol, qr = [], [], [], []
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        q = torch.randn(2, 16, 1024, 128, device="cuda").to(torch.bfloat16)
        for i in range(6):
            k, v = (torch.randn(2, 16, 1024, 128, device="cuda").to(torch.bfloat16) for _ in range(2))
            causal = i % 2 == 1
            out = kiln.ops.scaled_dot_product_attention(q, k, v, scale=0.09, mask="causal" if causal else None)
            prefill.append((q, k, v, causal, out))
            q = out * 4
        for _ in range(6):
            q1 = torch.randn(2, 4, 1, 64, device="cuda").to(torch.float16)
            k, v = (torch.randn(2, 2, 700, 64, device="cuda").to(torch.float16) for _ in range(2))
            decode.append((q1, k, v, kiln.ops.scaled_dot_product_attention(q1, k, v, scale=0.125)))
        for _ in range(4):
            m = torch.randn(3, 200, 200, device="cuda")
            a = m @ m.transpose(1, 2) + 200 * torch.eye(200, device="cuda")
            chol.append((a, kiln.ops.cholesky(a)))
            b = torch.randn(3, 150, 70, device="cuda")
            qr.append((b, kiln.ops.qr(b)))
    side.synchronize()
    for q, k, v, causal, out in prefill:
        assert_close(ref(out), torch_attention_reference(q, k, v, 0.09, causal), "bfloat16")
    for q1, k, v, out in decode:
        assert_close(ref(out), attention_reference(q1, k, v, 0.125, None), "float16")
    for a, out in chol:
        assert_close(ref(out), np.linalg.cholesky(ref(a)), "float32")
    for b, (qq, rr) in qr:
        assert_close(ref(qq) @ ref(rr), ref(b), "float32")


@pytest.mark.parametrize("stream", ["default", "side"])
def test_attention_called_back_to_back_matches_one_call_alone(stream):
    """A model calls attention layer after layer while the GPU is still busy with the earlier
    ones: every call of a back-to-back run must give exactly what one call alone gives (more
    query tiles than multiprocessors, so each call's tile counter is used, and kernels long
    enough that later calls are queued while earlier ones run)."""
    q, k, v = (torch.randn(1, 32, 4096, 128, device="cuda").to(torch.bfloat16) for _ in range(3))
    alone = kiln.ops.scaled_dot_product_attention(q, k, v, scale=0.09)
    torch.cuda.synchronize()
    assert_close(ref(alone[:, :1]), torch_attention_reference(q[:, :1], k[:, :1], v[:, :1], 0.09, False), "bfloat16")
    side = torch.cuda.Stream() if stream == "side" else torch.cuda.current_stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        outs = [kiln.ops.scaled_dot_product_attention(q, k, v, scale=0.09) for _ in range(12)]
    side.synchronize()
    for i, out in enumerate(outs):
        assert torch.equal(out, alone), f"call {i} of the run differs from the call alone"


def test_op_arguments_of_every_kind_beside_a_cuda_tensor():
    """The extension reads plain CUDA tensors itself: a tensor subclass (a Parameter) and a
    requires-grad tensor beside them give the same answers; a dtype kiln lacks and a CPU tensor
    beside CUDA ones are errors naming what is wrong; the outputs land on the inputs' device."""
    x = torch.randn(6, 512, device="cuda", requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(512, device="cuda"))
    out = kiln.ops.rms_norm(x, weight, 1e-5)
    assert out.device == x.device and out.shape == x.shape and not out.requires_grad
    xd = ref(x)
    want = xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + 1e-5) * ref(weight)
    assert_close(ref(out), want, "float32")
    assert_close(ref(kiln.ops.exp(x)), np.exp(xd), "float32")
    with pytest.raises(kiln.UnsupportedDTypeError, match="float64"):
        kiln.ops.exp(torch.randn(8, device="cuda", dtype=torch.float64))
    with pytest.raises(kiln.KilnError):
        kiln.ops.rms_norm(x, torch.randn(512), 1e-5)  # the weight on the CPU
