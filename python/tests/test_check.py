"""`kiln.check`: a call run under the sanitizer returns its findings on the kernel's lines."""

import inspect

import numpy as np
import pytest

import kiln
import test_cookbook

EXCHANGE = """
uint i = thread_position_in_threadgroup.x;
threadgroup float slot[64];
slot[i] = inp[i];
threadgroup_barrier(mem_flags::mem_threadgroup);
float partner = slot[63 - i];
slot[i] = partner + inp[i];
threadgroup_barrier(mem_flags::mem_threadgroup);
out[i] = slot[i];
"""


def _args(a):
    return dict(inputs=[a], output_shapes=[a.shape], output_dtypes=[a.dtype], grid=(a.size, 1, 1),
                threadgroup=(a.size, 1, 1))


def test_a_cross_simdgroup_exchange_without_a_barrier_is_a_race_on_both_lines(rng):
    a = rng.uniform(0.5, 2.0, size=64).astype(np.float32)
    k = kiln.metal_kernel("exchange", ["inp"], ["out"], EXCHANGE)
    found = kiln.check(k, **_args(a))
    races = [f for f in found if f["kind"] == "race" and f["severity"] == "error"]
    assert races, found
    assert all(f["kernel"] == "exchange" and f["buffer"] == "slot" for f in races)
    # The body starts with a newline: its first line is empty.
    assert {tuple(f["lines"]) for f in races} == {(6, 7)}
    assert races[0]["text"].strip().startswith("float partner")


def test_the_fixed_kernel_is_clean_and_its_call_still_matches_numpy(rng):
    a = rng.uniform(0.5, 2.0, size=64).astype(np.float32)
    fixed = EXCHANGE.replace("slot[i] = partner", "threadgroup_barrier(mem_flags::mem_threadgroup);\nslot[i] = partner")
    k = kiln.metal_kernel("exchange_fixed", ["inp"], ["out"], fixed)
    assert kiln.check(k, **_args(a)) == []
    (out,) = k(**_args(a))
    np.testing.assert_allclose(out, a[::-1] + a, rtol=1e-6)


def test_an_output_without_init_value_read_before_written_is_an_uninitialized_read(rng):
    a = rng.uniform(0.5, 2.0, size=128).astype(np.float32)
    k = kiln.metal_kernel("accumulate", ["inp"], ["out"], "uint i = thread_position_in_grid.x;\nout[i] += inp[i];")
    found = kiln.check(k, **_args(a))
    assert [(f["kind"], f["line"]) for f in found] == [("uninitialized-read", 2)]
    assert kiln.check(k, init_value=0.0, **_args(a)) == []


LIBRARY = """
#include <metal_stdlib>
using namespace metal;

kernel void half_sum(device const float* inp [[buffer(0)]], device float* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float x = inp[i];
    if (lane < 16) {
        x = simd_sum(x);
    }
    out[i] = x;
}

kernel void full_sum(device const float* inp [[buffer(0)]], device float* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = simd_sum(inp[i]);
}

kernel void half_shuffle(device const float* inp [[buffer(0)]], device float* out [[buffer(1)]],
                         uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float x = inp[i];
    if (lane < 16) {
        x = simd_shuffle_down(x, 16);
    }
    out[i] = x;
}
"""


def test_library_kernels_are_checked_with_dispatch_keywords(rng):
    a = rng.uniform(0.5, 2.0, size=64).astype(np.float32)
    lib = kiln.metal_library("sums", LIBRARY)
    out = kiln.Output((64,), np.float32)
    # A shuffle reading lanes that are not in the call is undefined in Metal; a reduction over
    # the lanes in the call is defined.
    found = kiln.check(lib, function="half_shuffle", buffers=[a, out], threadgroup=(64, 1, 1), threads=(64, 1, 1))
    assert [(f["kind"], f["severity"], f["line"]) for f in found] == [("barrier-divergence", "error", 23)], found
    for function in ("half_sum", "full_sum"):
        clean = kiln.check(lib, function=function, buffers=[a, out], threadgroup=(64, 1, 1), threads=(64, 1, 1))
        assert clean == [], (function, clean)
    (sums,) = lib.dispatch("full_sum", [a, out], threadgroup=(64, 1, 1), threads=(64, 1, 1))
    np.testing.assert_allclose(sums, np.repeat(a.reshape(2, 32).astype(np.float64).sum(axis=1), 32), rtol=1e-5)


# Every kernel of the seed cookbook (test_cookbook.py) comes back clean: each cookbook test runs
# once in float32 with every call of a kernel also run under the sanitizer, so the test's own
# reference checks still hold and the sanitizer must find nothing.
COOKBOOK_TESTS = sorted(name for name in vars(test_cookbook) if name.startswith("test_"))


@pytest.mark.parametrize("name", COOKBOOK_TESTS)
def test_cookbook_kernels_have_no_findings(name, rng, monkeypatch):
    call = kiln.MetalKernel.__call__
    checked, found = [], []

    def call_checked(kernel, **keywords):
        checked.append(kernel.name)
        found.extend(f"{kernel.name} line {f['line']}: {f['kind']} ({f['severity']}): {f['message']}"
                     for f in kiln.check(kernel, **keywords))
        return call(kernel, **keywords)

    monkeypatch.setattr(kiln.MetalKernel, "__call__", call_checked)
    test = getattr(test_cookbook, name)
    params = inspect.signature(test).parameters
    for traditional in (False, True) if "traditional" in params else (None,):
        arguments = {"rng": rng}
        if "dtype" in params:
            arguments["dtype"] = np.dtype(np.float32)
        if traditional is not None:
            arguments["traditional"] = traditional
        test(**arguments)
    assert checked, f"{name} called no kernel"
    assert found == [], "\n".join(found)


def test_kernels_from_the_mlx_drop_in_are_checked_on_their_mlx_arrays(rng):
    mx = pytest.importorskip("mlx.core")
    from kiln import mlx as kiln_mlx

    a = rng.uniform(0.5, 2.0, size=64).astype(np.float32)
    args = dict(_args(a), inputs=[mx.array(a)], output_dtypes=[mx.float32])
    racy = kiln_mlx.metal_kernel("exchange", ["inp"], ["out"], EXCHANGE)
    found = kiln.check(racy, **args)
    races = [f for f in found if f["kind"] == "race" and f["severity"] == "error"]
    assert races and all(f["buffer"] == "slot" for f in races), found
    fixed = EXCHANGE.replace("slot[i] = partner", "threadgroup_barrier(mem_flags::mem_threadgroup);\nslot[i] = partner")
    assert kiln.check(kiln_mlx.metal_kernel("exchange_fixed", ["inp"], ["out"], fixed), **args) == []


def test_a_private_array_read_before_written_is_an_uninitialized_read(rng):
    a = rng.uniform(0.5, 2.0, size=32).astype(np.float32)
    source = "uint i = thread_position_in_grid.x;\nfloat acc[2];\nacc[0] = inp[i];\nout[i] = acc[0] + acc[1];"
    found = kiln.check(kiln.metal_kernel("private", ["inp"], ["out"], source), **_args(a))
    assert [(f["kind"], f["buffer"], f["line"]) for f in found] == [("uninitialized-read", "acc", 4)], found


def test_a_finding_in_an_included_header_is_rendered_with_the_headers_name():
    from kiln._check import render

    finding = {"severity": "error", "kind": "race", "kernel": "k", "message": "m", "part": "source",
               "line": 446, "text": "x = y;", "file": "../definitions.metal",
               "other_line": 12, "other_text": "y = 1;", "other_file": None}
    text = render(finding)
    assert "../definitions.metal line 446 | x = y;" in text
    assert "source line 12 | y = 1;" in text
