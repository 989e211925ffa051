"""Shared fixtures: a seeded generator per test, the dtype table and tolerances, and the CUDA
requirement (KILN_REQUIRE_BACKEND=cuda turns a skipped CUDA test into a failure)."""

import os

import ml_dtypes
import numpy as np
import pytest

import kiln

FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
ALL_DTYPES = [
    np.dtype(np.bool_), np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64),
    np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64),
    *FLOAT_DTYPES,
]
# Relative L2 error allowed per dtype (kiln's table: kiln::check).
TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


def rel_l2(got, want) -> float:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert not np.isnan(got).any(), "NaN in the output"
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def assert_close(got, want, dtype):
    name = np.dtype(dtype).name
    err = rel_l2(np.asarray(got).astype(np.float64), want)
    assert err <= TOLERANCE[name], f"relative L2 error {err:.3g} above {TOLERANCE[name]} for {name}"


def random_array(rng, shape, dtype, low=-2.0, high=2.0):
    """Fresh random values of ``dtype`` (never all zeros)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, endpoint=True).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(np.float32).astype(dtype)


@pytest.fixture
def rng(request):
    seed = abs(hash(request.node.nodeid)) % (2**32)
    return np.random.default_rng(seed)


def cuda_required() -> bool:
    return os.environ.get("KILN_REQUIRE_BACKEND", "") == "cuda"


def pytest_runtest_setup(item):
    """CUDA tests skip without a GPU (or without PyTorch, which they run on), and fail instead
    when the run was required to reach CUDA."""
    if "cuda" not in item.keywords:
        return
    try:
        import torch  # noqa: F401

        reason = None if kiln.cuda_available() and torch.cuda.is_available() else "no CUDA device"
    except ImportError:
        reason = "PyTorch is not installed"
    if reason is not None:
        reason = f"{reason} ({kiln.cuda_status()})"
        if cuda_required():
            pytest.fail(f"KILN_REQUIRE_BACKEND=cuda but CUDA was not reached: {reason}")
        pytest.skip(reason)


# Every kernel call these modules make is also compiled, with NVRTC for sm_90, in the form the
# MLX drop-in gives MLX's mx.fast.cuda_kernel on MLX's CUDA build (mlx_cuda_standin.Recorder);
# a source that does not compile fails the test that made the call.
CUDA_KERNEL_SOURCES_OF = {"test_cookbook", "test_mlx_dropin", "test_mlx_behaviours", "test_mlx_cuda_kernel"}
_cuda_kernel_recorder = []


@pytest.fixture(autouse=True)
def _cuda_kernel_sources_compile(request):
    if request.module.__name__ not in CUDA_KERNEL_SOURCES_OF:
        yield
        return
    from mlx_cuda_standin import Recorder, mlx_compiles_cuda_kernels, nvrtc_available

    # On MLX's CUDA build MLX compiles each source itself: a failure is the call's own (and a
    # test that expects one must not fail again here).
    if mlx_compiles_cuda_kernels() or not nvrtc_available():
        yield
        return
    if not _cuda_kernel_recorder:
        _cuda_kernel_recorder.append(Recorder())
    recorder = _cuda_kernel_recorder[0]
    with recorder.recording():
        yield
    recorder.compile_pending()
