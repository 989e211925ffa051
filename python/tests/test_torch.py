"""PyTorch tensors: CPU tensors on the emulator, CUDA tensors on their own GPU and PyTorch's
current stream (a second device where present, a non-default stream), outputs as tensors of
the input's device. Skipped without PyTorch; the CUDA tests fail instead of skipping when
KILN_REQUIRE_BACKEND=cuda (conftest.py)."""

import os

import numpy as np
import pytest

import kiln
from conftest import assert_close

if os.environ.get("KILN_REQUIRE_BACKEND") == "cuda":
    import torch  # a run that must reach CUDA fails without PyTorch
else:
    torch = pytest.importorskip("torch")

MYEXP = kiln.metal_kernel("myexp", ["inp"], ["out"], """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
""")
STRIDED = kiln.metal_kernel("strided_scale", ["inp", "s"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = inp[elem_to_loc(int64_t(i), inp_shape, inp_strides, inp_ndim)] * s;
""", ensure_row_contiguous=False)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def ref(t):
    return t.detach().to("cpu", torch.float64).numpy()


def np_name(dtype):
    return str(dtype).rpartition(".")[2]


def run_exp(x, **kw):
    return MYEXP(inputs=[x], template=[("T", torch.float32)], grid=(x.numel(), 1, 1), threadgroup=(256, 1, 1),
                 output_shapes=[x.shape], output_dtypes=[x.dtype], **kw)[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=np_name)
def test_cpu_tensors_run_on_the_emulator_and_come_back_as_tensors(dtype):
    x = torch.randn(4, 16).to(dtype)
    out = run_exp(x)
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.dtype == dtype
    assert_close(ref(out), np.exp(ref(x)), np_name(dtype))


def test_cpu_tensor_views_keep_their_strides():
    base = torch.randn(10, 12)
    x = base.t()[::2]
    (out,) = STRIDED(inputs=[x, 3.0], grid=(x.numel(), 1, 1), threadgroup=(64, 1, 1), output_shapes=[x.shape],
                     output_dtypes=[torch.float32])
    assert_close(ref(out), ref(x) * 3, "float32")


STRIDES_SEEN = kiln.metal_kernel("strides_seen", ["inp"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = int(inp_strides[i]);
""", ensure_row_contiguous=False)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_contiguous_tensor_shows_row_major_strides_as_mlx_does(device):
    """A transposed column is contiguous, with PyTorch's stride on its axis of one element left
    free (5 here): kernels see the row-major strides an MLX array of that shape has, on the
    cached path of CUDA tensors as on the general path."""
    x = torch.randn(1, 5, device=device).t()
    assert x.is_contiguous() and x.stride() == (1, 5)
    for _ in range(2):
        (out,) = STRIDES_SEEN(inputs=[x], output_shapes=[(2,)], output_dtypes=[torch.int32], grid=(2, 1, 1),
                              threadgroup=(2, 1, 1))
        assert out.tolist() == [1, 1]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=np_name)
def test_cuda_tensors_run_on_their_gpu(dtype):
    x = torch.randn(64, 1000, device="cuda").to(dtype)
    out = run_exp(x)
    assert out.device == x.device and out.dtype == dtype and out.is_contiguous()
    assert_close(ref(out), np.exp(ref(x)), np_name(dtype))


@pytest.mark.cuda
def test_cuda_strided_and_non_contiguous_inputs():
    base = torch.randn(300, 70, device="cuda")
    x = base.t()[:, ::3]
    (out,) = STRIDED(inputs=[x, -2.0], grid=(x.numel(), 1, 1), threadgroup=(128, 1, 1), output_shapes=[x.shape],
                     output_dtypes=[torch.float32])
    assert_close(ref(out), ref(x) * -2, "float32")
    out = run_exp(x)  # ensure_row_contiguous copies on PyTorch's stream
    assert_close(ref(out), np.exp(ref(x)), "float32")


@pytest.mark.cuda
def test_cuda_launch_goes_on_the_current_non_default_stream():
    side = torch.cuda.Stream()
    x = torch.randn(1 << 22, device="cuda")
    with torch.cuda.stream(side):
        side.wait_stream(torch.cuda.current_stream())
        y = x * 2  # queued on `side`
        out = run_exp(y)  # must run after `y` on `side` without a wait added by kiln
        z = out + 1
    side.synchronize()
    assert_close(ref(z), np.exp(ref(x) * 2) + 1, "float32")


@pytest.mark.cuda
def test_explicit_stream_argument():
    side = torch.cuda.Stream()
    x = torch.randn(4096, device="cuda")
    torch.cuda.synchronize()
    out = run_exp(x, stream=side)
    side.synchronize()
    assert_close(ref(out), np.exp(ref(x)), "float32")


@pytest.mark.cuda
def test_a_second_device_when_present():
    if torch.cuda.device_count() < 2:
        pytest.skip("one CUDA device")
    x = torch.randn(5000, device="cuda:1")
    for _ in range(3):  # the first call and the calls after it (which a cache could take)
        out = run_exp(x)
        assert out.device == torch.device("cuda:1")
        assert torch.cuda.current_device() == 0, "the call leaves the current device as it was"
        assert_close(ref(out), np.exp(ref(x)), "float32")
    with torch.cuda.device(1):
        out = run_exp(x)
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_device() == 0
    assert_close(ref(out), np.exp(ref(x)), "float32")
    # Library ops too, the attention's planning included (it uploads to the device).
    q = torch.randn(1, 2, 128, 64, device="cuda:1", dtype=torch.bfloat16)
    for _ in range(2):
        att = kiln.ops.scaled_dot_product_attention(q, q, q, scale=0.125, mask="causal")
        assert att.device == q.device and torch.cuda.current_device() == 0
        assert kiln.ops.rms_norm(x.reshape(10, 500), torch.ones(500, device="cuda:1"), 1e-5).device == x.device
        assert torch.cuda.current_device() == 0
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=True, scale=0.125)
    assert_close(ref(att), ref(want), "bfloat16")


@pytest.mark.cuda
def test_cuda_init_value_scalars_and_atomics():
    k = kiln.metal_kernel("scatter_add", ["values", "index", "scale"], ["out"], """
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&out[index[i]], values[i] * scale, memory_order_relaxed);
    """, atomic_outputs=True)
    values = torch.randn(10000, device="cuda")
    index = torch.randint(0, 50, (10000,), device="cuda", dtype=torch.int32)
    (out,) = k(inputs=[values, index, np.float32(0.5)], grid=(10000, 1, 1), threadgroup=(256, 1, 1),
               output_shapes=[(50,)], output_dtypes=[torch.float32], init_value=0)
    want = np.zeros(50)
    np.add.at(want, index.cpu().numpy(), ref(values) * 0.5)
    assert_close(ref(out), want, "float32")


@pytest.mark.cuda
def test_numpy_inputs_moved_to_the_gpu_explicitly():
    a = np.random.default_rng(3).normal(size=1000).astype(np.float32)
    (out,) = MYEXP(inputs=[a], template=[("T", np.float32)], grid=(1000, 1, 1), threadgroup=(256, 1, 1),
                   output_shapes=[a.shape], output_dtypes=[a.dtype], device="cuda:0")
    assert isinstance(out, np.ndarray)
    assert_close(out, np.exp(a.astype(np.float64)), "float32")


@pytest.mark.cuda
def test_cuda_errors_are_typed():
    x = torch.randn(16, device="cuda")
    bad = kiln.metal_kernel("bad_cuda", ["a"], ["out"], "out[0] = nope;")
    with pytest.raises(kiln.CompileError, match="bad_cuda"):
        bad(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[torch.float32])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=np_name)
def test_one_launch_ops_run_on_cuda_tensors(dtype):
    x = torch.randn(300, 1024, device="cuda").to(dtype)
    w = (torch.rand(1024, device="cuda") + 0.5).to(dtype)
    out = kiln.ops.rms_norm(x, w, 1e-5)
    assert out.device == x.device and out.dtype == dtype
    v = ref(x)
    assert_close(ref(out), v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * ref(w), np_name(dtype))
    e = np.exp(v - v.max(-1, keepdims=True))
    assert_close(ref(kiln.ops.softmax(x)), e / e.sum(-1, keepdims=True), np_name(dtype))


@pytest.mark.cuda
def test_metal_library_on_cuda_tensors_writes_in_place_and_allocates_outputs():
    lib = kiln.metal_library("cuda_lib", """
        #include <metal_stdlib>
        using namespace metal;
        kernel void scale(device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                          constant float& s [[buffer(2)]], uint i [[thread_position_in_grid]]) {
            y[i] = x[i] * s;
            x[i] = -x[i];
        }
    """)
    x = torch.randn(1000, device="cuda")
    before = ref(x)
    (y,) = lib.dispatch("scale", [x, kiln.Output((1000,), torch.float32), np.float32(3.0)], threads=(1000, 1, 1),
                        threadgroup=(256, 1, 1))
    assert y.device == x.device
    assert_close(ref(y), before * 3, "float32")
    assert_close(ref(x), -before, "float32")
