"""`kiln.check`: a call run under the sanitizer returns its findings on the kernel's lines."""

import numpy as np

import kiln

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
