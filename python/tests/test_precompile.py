"""`MetalKernel.precompile`: compiles a call's kernel without running it."""

import numpy as np
import pytest

import kiln
from conftest import assert_close

MYEXP = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""


def test_precompile_then_call_matches_numpy(rng):
    k = kiln.metal_kernel("myexp_precompiled", ["inp"], ["out"], MYEXP)
    a = rng.uniform(-2, 2, size=(4, 16)).astype(np.float16)
    args = dict(output_shapes=[a.shape], output_dtypes=[np.float16], grid=(a.size, 1, 1),
                threadgroup=(256, 1, 1), template=[("T", np.float32)])
    # Only dtypes and ranks matter: other data of the same kind precompiles the same kernel.
    assert k.precompile(inputs=[np.empty_like(a)], **args) is None
    (out,) = k(inputs=[a], **args)
    assert_close(out, np.exp(a.astype(np.float64)), np.float16)


def test_precompile_compiles_without_running():
    a = np.ones(16, np.float32)
    args = dict(output_shapes=[(16,)], output_dtypes=[np.float32], grid=(16, 1, 1), threadgroup=(16, 1, 1))
    broken = kiln.metal_kernel("broken_precompile", ["a"], ["out"], "out[0] = undefined_name;")
    with pytest.raises(kiln.CompileError, match="broken_precompile"):
        broken.precompile(inputs=[a], **args)
    # A kernel that faults when run precompiles cleanly: nothing was launched.
    overrun = kiln.metal_kernel("overrun_precompile", ["a"], ["out"],
                                "uint i = thread_position_in_grid.x; out[i + 100] = a[i];")
    overrun.precompile(inputs=[a], **args)
    with pytest.raises(kiln.KernelFaultError, match="overrun_precompile"):
        overrun(inputs=[a], **args)
