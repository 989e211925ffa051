"""The CUDA translation of the kernels the Python tests run, compiled by NVRTC for sm_90 without
a GPU (as the Rust suite's nvrtc_compile tests do): where the test command installed NVRTC
(KILN_REQUIRE_BACKEND=nvrtc) a missing NVRTC is a failure, elsewhere a skip."""

import os

import ml_dtypes
import numpy as np
import pytest

import kiln
import test_cookbook as cookbook


@pytest.fixture(scope="module", autouse=True)
def _nvrtc():
    try:
        kiln.nvrtc_version()
    except kiln.BackendUnavailableError as e:
        if os.environ.get("KILN_REQUIRE_BACKEND") in ("nvrtc", "cuda"):
            pytest.fail(f"NVRTC is required for this run: {e}")
        pytest.skip(f"no NVRTC: {e}")


CASES = {
    "myexp": (cookbook.MYEXP, lambda a: dict(inputs=[a], template=[("T", np.float32)])),
    "myexp_strided": (cookbook.EXP_STRIDED, lambda a: dict(inputs=[a[::2]], template=[("T", np.float32)])),
    "gelu": (cookbook.GELU, lambda a: dict(inputs=[a], template=[("T", a.dtype)])),
    "rms_norm_simd": (cookbook.RMS_SIMD, lambda a: dict(inputs=[a, a[0], 1e-5], template=[("T", a.dtype)])),
    "rms_norm_threadgroup": (cookbook.RMS_TG,
                             lambda a: dict(inputs=[a, a[0], 1e-5], template=[("T", a.dtype), ("N", 256)])),
    "grid_sample": (cookbook.GRID_SAMPLE,
                    lambda a: dict(inputs=[a.reshape(1, 2, 4, 8), a[:1, :8].reshape(1, 2, 2, 2)],
                                   template=[("T", a.dtype)])),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_translation_compiles_for_sm90(name, dtype):
    kernel, args = CASES[name]
    a = np.ones((8, 8), dtype)
    size = kernel.compile_cuda(output_shapes=[(8, 8)], output_dtypes=[dtype], arch=(9, 0), **args(a))
    assert size > 1000, "a cubin came back"


def test_atomic_vjp_compiles_for_sm90():
    x = np.ones((1, 4, 4, 2), np.float32)
    g = np.zeros((1, 2, 2, 2), np.float32)
    size = cookbook.GRID_SAMPLE_VJP.compile_cuda(inputs=[x, g, np.ones((1, 2, 2, 2), np.float32)],
                                                 template=[("T", np.float32)], output_shapes=[x.shape, g.shape],
                                                 output_dtypes=[np.float32, np.float32])
    assert size > 1000


def test_nvrtc_compile_errors_name_the_kernel():
    bad = kiln.metal_kernel("bad_for_nvrtc", ["a"], ["out"], "out[0] = a[0] +;")
    with pytest.raises(kiln.CompileError, match="bad_for_nvrtc"):
        bad.compile_cuda(inputs=[np.ones(4, np.float32)], output_shapes=[(1,)], output_dtypes=[np.float32])
