"""Several Python threads calling one kernel and one library op at once: on NumPy arrays (the
CPU emulator) and on CUDA tensors, each thread on its own stream and, with two GPUs, on its own
device. Every call checks its own fresh inputs."""

import threading

import numpy as np
import pytest

import kiln
from conftest import assert_close

SCALED_EXP = kiln.metal_kernel("threads_scaled_exp", ["x", "s"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(x[i]) * s;
""")


def rms_norm_ref(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def run_threads(work, count):
    errors = []

    def guarded(t):
        try:
            work(t)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def check_calls(seed, to_framework, to_numpy, calls=5):
    rng = np.random.default_rng(seed)
    for c in range(calls):
        x = rng.normal(size=(16, 128)).astype(np.float32)
        w = rng.uniform(0.5, 1.5, size=128).astype(np.float32)
        s = float(seed + c)
        xt = to_framework(x)
        (y,) = SCALED_EXP(inputs=[xt, s], grid=(x.size, 1, 1), threadgroup=(64, 1, 1), output_shapes=[x.shape],
                          output_dtypes=[np.float32])
        assert_close(to_numpy(y), np.exp(x.astype(np.float64)) * np.float32(s), "float32")
        normed = kiln.ops.rms_norm(xt, to_framework(w), 1e-5)
        assert_close(to_numpy(normed), rms_norm_ref(x.astype(np.float64), w), "float32")


def test_cpu_threads_at_once():
    run_threads(lambda t: check_calls(t, lambda a: a, np.asarray), 4)


@pytest.mark.cuda
def test_cuda_threads_on_their_own_streams_and_devices():
    import torch

    devices = torch.cuda.device_count()

    def work(t):
        device = torch.device("cuda", t % devices)
        stream = torch.cuda.Stream(device)
        with torch.cuda.device(device), torch.cuda.stream(stream):
            check_calls(t, lambda a: torch.from_numpy(a).to(device), lambda y: y.cpu().numpy(), calls=20)

    run_threads(work, 4)


def test_a_kernel_called_from_another_thread_runs_there_and_still_stops_at_its_timeout():
    # Threads other than the main one run CPU launches on their own thread (they run no signal
    # handlers to poll for); the timeout is the process watcher's, so it still applies.
    spin = kiln.metal_kernel("threads_spin", ["inp"], ["out"], """
        uint i = thread_position_in_grid.x;
        while (true) { if (inp[i] < -1e30f) break; }
        out[i] = inp[i];
    """)
    x = np.ones(4, np.float32)
    results = []

    def work(_):
        try:
            spin(inputs=[x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1),
                 threadgroup=(4, 1, 1), timeout=0.5)
        except kiln.TimeoutError as e:
            results.append(str(e))
        (out,) = SCALED_EXP(inputs=[x, 2.0], output_shapes=[(4,)], output_dtypes=[np.float32],
                            grid=(4, 1, 1), threadgroup=(4, 1, 1))
        assert_close(out, np.exp(x) * 2.0, np.float32)

    run_threads(work, 2)
    assert len(results) == 2 and all("threads_spin" in r for r in results), results
