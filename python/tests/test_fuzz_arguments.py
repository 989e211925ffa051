"""Property-based fuzz of the Python API's arguments and arrays (hypothesis): whatever a caller
passes, a kernel call or a dispatch either returns correct outputs or raises a
``kiln.KilnError`` — never another exception, a crash or a hang. Bounded in examples and time so
that CI stays fast; the kernels compile once (the kernel cache keeps them)."""

import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kiln  # noqa: E402

SETTINGS = settings(max_examples=int(os.environ.get("KILN_FUZZ_EXAMPLES", "150")), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

TWICE = kiln.metal_kernel("fuzz_twice", ["inp"], ["out"],
                          "uint i = thread_position_in_grid.x; if (i < inp_shape[0]) out[i] = inp[i] * 2;")

LIBRARY = kiln.metal_library("fuzz_lib", """
#include <metal_stdlib>
using namespace metal;
kernel void add1(device float* b [[buffer(0)]], constant uint& n [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) { if (i < n) b[i] += 1.0f; }
""")

# Small values, and values past every limit (sizes beyond any memory, counts beyond 32 bits): a
# legal but huge size would only make a call slow, which is not what this looks for.
integers = st.one_of(st.integers(-3, 70), st.sampled_from([-(2**40), -(2**31), 2**32, 2**44, 2**63, 2**64]))
odd_values = st.one_of(
    st.none(), st.booleans(), integers, st.floats(allow_nan=True), st.text(max_size=4), st.just(object()),
    st.lists(integers, max_size=4), st.tuples(integers, integers, integers),
)
odd_dims = st.one_of(st.tuples(st.integers(0, 70), st.integers(0, 2), st.just(1)), st.lists(integers, max_size=4),
                     odd_values)


@st.composite
def arrays(draw, odd=False):
    dtypes = ["<f8", "<c8", "|b1", "<u2", ">f2"] if odd else ["<f4", ">f4", "<f2", "<i4"]
    a = np.arange(draw(st.integers(0, 40))).astype(draw(st.sampled_from(dtypes)))
    a = a[::draw(st.sampled_from([1, 1, 2, -1]))]
    if draw(st.integers(0, 5)) == 0:
        a.setflags(write=False)
    return a


@st.composite
def calls(draw, valid, odd):
    """Keyword arguments from ``valid``, with at most two of them (drawn) replaced by values from
    ``odd``: most calls are near-valid, so both the run path and each error path are reached."""
    corrupt = draw(st.lists(st.sampled_from(sorted(valid)), max_size=2, unique=True))
    return {name: draw(odd[name] if name in corrupt else valid[name]) for name in valid}


KERNEL_CALLS = calls(
    valid=dict(
        inputs=st.lists(arrays(), min_size=1, max_size=1),
        output_shapes=st.integers(1, 48).map(lambda n: [(n,)]),
        output_dtypes=st.sampled_from([[np.float32], [np.float16], [np.int32], ["bfloat16"]]),
        grid=st.tuples(st.integers(1, 70), st.just(1), st.just(1)),
        threadgroup=st.tuples(st.integers(1, 70), st.just(1), st.just(1)),
        template=st.none(),
        init_value=st.one_of(st.none(), st.floats(-4, 4)),
        device=st.sampled_from([None, "cpu"]),
        timeout=st.one_of(st.none(), st.floats(5, 60)),
    ),
    odd=dict(
        inputs=st.one_of(st.lists(st.one_of(arrays(odd=True), arrays(), odd_values), max_size=3), odd_values),
        output_shapes=st.one_of(st.lists(st.lists(integers, max_size=3), max_size=3), odd_values),
        output_dtypes=st.one_of(st.lists(st.sampled_from([np.complex64, np.float64, "nope", 3]), max_size=3),
                                odd_values),
        grid=odd_dims,
        threadgroup=odd_dims,
        template=st.one_of(st.lists(st.tuples(st.sampled_from(["T", "N", "1x", ""]), odd_values), max_size=2),
                           odd_values),
        init_value=odd_values,
        device=st.sampled_from(["tpu", 3, "cuda:x", ""]),
        timeout=odd_values,
    ),
)

DISPATCHES = calls(
    valid=dict(
        buffer=arrays(),
        n=st.integers(0, 48),
        threads=st.tuples(st.integers(1, 70), st.just(1), st.just(1)),
        threadgroup=st.tuples(st.integers(1, 70), st.just(1), st.just(1)),
        threadgroup_memory=st.just(()),
        constants=st.none(),
    ),
    odd=dict(
        buffer=st.one_of(arrays(odd=True), odd_values),
        n=integers,
        threads=odd_dims,
        threadgroup=odd_dims,
        threadgroup_memory=st.one_of(st.lists(integers, max_size=2), odd_values),
        constants=st.one_of(st.dictionaries(st.one_of(st.integers(-2, 3), st.text(max_size=3)), odd_values,
                                            max_size=2), odd_values),
    ),
)


def _reference_twice(inputs, grid):
    """What a successful call writes: 2 * inp where the grid's threads reach (none when a
    dimension of the grid is zero)."""
    (x,) = inputs
    out = np.asarray(x, dtype=np.float64) * 2
    reached = grid[0] if grid[1] * grid[2] > 0 else 0
    return out[: min(reached, out.size)]


@SETTINGS
@given(call=KERNEL_CALLS)
def test_a_kernel_call_returns_or_raises_a_kiln_error(call):
    try:
        outs = TWICE(**call)
    except kiln.KilnError as e:
        event(type(e).__name__)
        return
    event("ran")
    # A call that went through wrote what the kernel says, where its grid reached.
    (out,) = outs
    want = _reference_twice(call["inputs"], tuple(call["grid"]))
    got = np.asarray(out, dtype=np.float64).reshape(-1)[: want.size]
    n = min(got.size, want.size)
    expected = want[:n].astype(out.dtype).astype(np.float64)
    np.testing.assert_array_equal(got[:n], expected)


@SETTINGS
@given(call=DISPATCHES)
def test_a_dispatch_returns_or_raises_a_kiln_error(call):
    buffer, n = call["buffer"], call["n"]
    before = np.array(buffer, copy=True) if isinstance(buffer, np.ndarray) else None
    count = np.uint32(n % 2**32) if isinstance(n, int) else n
    try:
        LIBRARY.dispatch("add1", [buffer, count], threads=call["threads"], threadgroup=call["threadgroup"],
                         threadgroup_memory=call["threadgroup_memory"], constants=call["constants"])
    except kiln.KilnError as e:
        event(type(e).__name__)
        if before is not None:
            np.testing.assert_array_equal(buffer, before)
        return
    event("ran")
    if before is not None and before.dtype == np.float32 and before.dtype.isnative:
        reached = min(int(count), int(np.prod(tuple(call["threads"]))), before.size)
        want = before.copy()
        want[:reached] += 1
        np.testing.assert_array_equal(buffer, want)
