"""The cached call of ``kiln.metal_kernel`` on PyTorch CUDA tensors (read, cached and launched
in one step by the extension): results on fresh data through repeated calls whose launch
descriptions change and come back, scalars and 0-d tensors beside the tensors, the current
stream, and the general path taking over where the cached one does not apply. Need a GPU."""

import os
import threading

import numpy as np
import pytest

import kiln
import kiln._kernel
from conftest import assert_close

if os.environ.get("KILN_REQUIRE_BACKEND") == "cuda":
    import torch  # a run that must reach CUDA fails without PyTorch
else:
    torch = pytest.importorskip("torch")

pytestmark = pytest.mark.cuda

AXPY = kiln.metal_kernel("cached_axpy", ["x", "y", "a", "b"], ["out", "count"], """
    uint i = thread_position_in_grid.x;
    if (i < x_shape[0]) {
        out[i] = static_cast<T>(static_cast<float>(x[i]) * a * b + static_cast<float>(y[i]));
    }
    if (i == 0) {
        count[0] = static_cast<int>(x_shape[0]) * SCALE;
    }
""")


def ref(t):
    return t.detach().to("cpu", torch.float64).numpy()


def run(x, y, a, b, scale, dtype=None, init_value=None):
    dtype = dtype or x.dtype
    n = x.shape[0]
    return AXPY(inputs=[x, y, a, b], template=[("T", dtype), ("SCALE", scale)], grid=(n, 1, 1),
                threadgroup=(128, 1, 1), output_shapes=[(n,), [1]], output_dtypes=[dtype, torch.int32],
                init_value=init_value)


class _NoGeneralPath:
    """Makes the general (Python) path fail, to show a call did not take it."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("the call took the general path")


def test_repeated_calls_change_and_reuse_their_launch_description(monkeypatch):
    monkeypatch.setattr(kiln._kernel, "_Inputs", _NoGeneralPath)
    b = torch.tensor(1.5, device="cuda")  # a 0-d tensor input beside the arrays
    # Sizes, dtypes and template values change and come back: each call must get its own.
    for n, dtype, scale in [(1000, torch.float32, 2), (37, torch.float32, 2), (1000, torch.float16, 3),
                            (1000, torch.float32, 5), (37, torch.float32, 2), (4096, torch.bfloat16, 7)]:
        x = torch.randn(n, device="cuda").to(dtype)
        y = torch.randn(n, device="cuda").to(dtype)
        out, count = run(x, y, -0.5, b, scale)
        assert out.device == x.device and out.dtype == dtype and out.shape == (n,)
        assert count.dtype == torch.int32 and int(count[0]) == n * scale
        assert_close(ref(out), ref(x) * -0.75 + ref(y), str(dtype).rpartition(".")[2])


def test_outputs_shaped_like_an_input_are_fresh_tensors(monkeypatch):
    """An output of an input's shape and dtype is allocated like that input: its own memory, on
    its device, contiguous, every element written; the inputs are left as they were. A column
    made by a transpose is contiguous with a stride other than 1 on its axis of one element."""
    monkeypatch.setattr(kiln._kernel, "_Inputs", _NoGeneralPath)
    b = torch.tensor(0.5, device="cuda")
    for x in [torch.randn(4099, device="cuda"), torch.randn(1, 4099, device="cuda").t()]:
        assert x.is_contiguous()
        kept = x.clone()
        n = x.shape[0]
        torch.cuda.synchronize()
        out = AXPY(inputs=[x, x, 3.0, b], template=[("T", x.dtype), ("SCALE", 1)], grid=(n, 1, 1),
                   threadgroup=(128, 1, 1), output_shapes=[tuple(x.shape), (1,)],
                   output_dtypes=[x.dtype, torch.int32])[0]
        assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device and out.is_contiguous()
        assert out.data_ptr() != x.data_ptr()
        assert torch.equal(x, kept)
        assert_close(ref(out).ravel(), ref(x).ravel() * 2.5, "float32")


def test_cached_calls_queue_on_the_current_stream(monkeypatch):
    monkeypatch.setattr(kiln._kernel, "_Inputs", _NoGeneralPath)
    side = torch.cuda.Stream()
    b = torch.tensor(2.0, device="cuda")
    x0 = torch.randn(1 << 22, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    outs = []
    with torch.cuda.stream(side):
        for i in range(3):
            x = x0 * (i + 1)  # queued on `side` just before the call
            out, _ = run(x, x, 1.0, b, 1)
            outs.append(out + 0)  # read back on `side` right after it
    side.synchronize()
    for i, out in enumerate(outs):
        assert_close(ref(out), ref(x0) * (i + 1) * 3, "float32")


def test_init_value_fills_outputs_the_kernel_does_not_write(monkeypatch):
    monkeypatch.setattr(kiln._kernel, "_Inputs", _NoGeneralPath)
    x = torch.randn(300, device="cuda")
    b = torch.tensor(1.0, device="cuda")
    fill = AXPY(inputs=[x, x, 1.0, b], template=[("T", torch.float32), ("SCALE", 1)], grid=(100, 1, 1),
                threadgroup=(128, 1, 1), output_shapes=[(300,), (1,)], output_dtypes=[torch.float32, torch.int32],
                init_value=-7)
    want = np.full(300, -7.0)
    want[:100] = ref(x)[:100] * 2
    assert_close(ref(fill[0]), want, "float32")


def test_calls_differing_only_in_grid_or_shape_spelling_get_their_launch(monkeypatch):
    """The cache compares every argument: a grid or threadgroup that changes and comes back, and
    an output shape given as a list or a tuple (the same shape), each run as asked."""
    monkeypatch.setattr(kiln._kernel, "_Inputs", _NoGeneralPath)
    x = torch.randn(512, device="cuda")
    b = torch.tensor(1.0, device="cuda")
    for rows, group, shape in [(512, 128, (512,)), (256, 128, [512]), (512, 64, [512]), (128, 32, (512,)),
                               (256, 128, (512,)), (512, 128, [512])]:
        out = AXPY(inputs=[x, x, 1.0, b], template=[("T", torch.float32), ("SCALE", 1)], grid=(rows, 1, 1),
                   threadgroup=(group, 1, 1), output_shapes=[shape, (1,)],
                   output_dtypes=[torch.float32, torch.int32], init_value=-3)[0]
        want = np.full(512, -3.0)
        want[:rows] = ref(x)[:rows] * 2
        assert_close(ref(out), want, "float32")


def test_the_general_path_takes_the_calls_the_cached_one_does_not():
    b = torch.tensor(1.0, device="cuda")
    base = torch.randn(64, 3, device="cuda")
    strided = base[:, 1]  # copied by the general path (ensure_row_contiguous), as MLX copies it
    out, _ = run(strided, strided, 2.0, b, 1)
    assert_close(ref(out), ref(strided) * 3, "float32")
    x = torch.randn(64, device="cuda")
    mixed = np.float32(0.25)  # a NumPy scalar keeps its dtype through the general path
    out, _ = run(x, x, mixed, b, 1)
    assert_close(ref(out), ref(x) * 1.25, "float32")
    with pytest.raises(kiln.InvalidArgumentError):
        run(x, torch.randn(64), 1.0, b, 1)  # a CPU tensor beside CUDA tensors is an error


def test_a_new_threads_calls_are_cached_once_its_device_is_current(monkeypatch):
    """The cached path runs where the tensors' device's context is the thread's current one (a
    launch leaves it current, so PyTorch's current device is kept); a thread that has not used
    CUDA yet gets its answer too, and its later calls are cached."""
    b = torch.tensor(1.0, device="cuda")
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    seen = {}

    def work():
        try:
            seen["first"] = run(x, y, 2.0, b, 1)[0]
            seen["device after the first"] = torch.cuda.current_device()
            with monkeypatch.context() as m:
                m.setattr(kiln._kernel, "_Inputs", _NoGeneralPath)
                seen["later"] = [run(x, y, a, b, 1)[0] for a in (3.0, -1.5)]
        except BaseException as e:  # noqa: BLE001  (reported on the test's thread)
            seen["error"] = e

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if "error" in seen:
        raise seen["error"]
    torch.cuda.synchronize()
    assert seen["device after the first"] == 0
    assert torch.cuda.current_device() == 0
    for a, out in zip((2.0, 3.0, -1.5), [seen["first"], *seen["later"]]):
        assert_close(ref(out), ref(x) * a + ref(y), "float32")


def test_verbose_and_describing_calls_on_cuda_tensors_leave_the_cached_path(capfd):
    """`verbose=True` prints the generated source and still runs; inside `describing()` (PyTorch
    tracing) a call returns fresh outputs of the right shapes and dtypes without running."""
    from kiln._abstract import describing

    b = torch.tensor(1.0, device="cuda")
    x = torch.randn(300, device="cuda")
    y = torch.randn(300, device="cuda")
    run(x, y, 2.0, b, 1)  # cached for these arguments
    capfd.readouterr()
    out = AXPY(inputs=[x, y, 2.0, b], template=[("T", torch.float32), ("SCALE", 1)], grid=(300, 1, 1),
               threadgroup=(128, 1, 1), output_shapes=[(300,), [1]], output_dtypes=[torch.float32, torch.int32],
               verbose=True)[0]
    printed = capfd.readouterr().out
    assert printed.startswith("Generated source code for `cached_axpy`:") and "x_shape" in printed
    assert_close(ref(out), ref(x) * 2 + ref(y), "float32")
    with describing():
        described = run(x, y, 2.0, b, 1)
    assert [tuple(o.shape) for o in described] == [(300,), (1,)]
    assert [o.dtype for o in described] == [torch.float32, torch.int32]
    assert all(o.device == x.device for o in described)
