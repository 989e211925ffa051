"""``kiln.testing`` on a small example project whose kernel module calls
``mx.fast.metal_kernel`` at import time, run by pytest's ``pytester`` in a fresh process: the
project's tests pass with one line of configuration and fail without it, the ``kiln_device``
fixture covers the backends present, and the comparison helpers hold kiln's tolerances."""

import os

import numpy as np
import pytest

pytest_plugins = ["pytester"]

KERNELS = '''
import mlx.core as mx

# Built at import time, as projects do: this must not fail off the Mac.
_scaled_exp = mx.fast.metal_kernel(
    name="scaled_exp", input_names=["x", "s"], output_names=["out"],
    source="""
        uint i = thread_position_in_grid.x;
        out[i] = static_cast<T>(metal::exp(static_cast<float>(x[i])) * s);
    """)


def scaled_exp(x, s):
    return _scaled_exp(inputs=[x, s], template=[("T", x.dtype)], grid=(x.size, 1, 1), threadgroup=(64, 1, 1),
                       output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''

PROJECT_TESTS = '''
import mlx.core as mx
import numpy as np
import pytest

from kiln.testing import assert_close
from kernels import scaled_exp


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_scaled_exp(kiln_device, dtype):
    x = mx.random.normal((3, 50)).astype(dtype)
    out = scaled_exp(x, 1.5)
    assert out.dtype == dtype
    assert_close(out, 1.5 * np.exp(np.asarray(x.astype(mx.float32)).astype(np.float64)))
'''


def write_project(pytester, conftest=None):
    pytester.makepyfile(kernels=KERNELS, test_project=PROJECT_TESTS)
    if conftest is not None:
        pytester.makeconftest(conftest)


def run(pytester, *args):
    # A fresh interpreter: the drop-in must be installed by the plugin, not by this process.
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


@pytest.fixture(autouse=True)
def needs_mlx():
    pytest.importorskip("mlx.core")


def backends_here():
    import kiln

    return 2 if kiln.cuda_available() or os.environ.get("KILN_REQUIRE_BACKEND") == "cuda" else 1


def test_one_command_line_flag_runs_the_project_tests(pytester):
    write_project(pytester)
    result = run(pytester, "-p", "kiln.testing", "-v")
    result.assert_outcomes(passed=3 * backends_here())
    result.stdout.fnmatch_lines(["*test_scaled_exp?cpu-*PASSED*"])


def test_one_conftest_line_runs_the_project_tests(pytester):
    write_project(pytester, conftest='pytest_plugins = ["kiln.testing"]\n')
    result = run(pytester, "--kiln-backends=cpu")
    result.assert_outcomes(passed=3)


def test_without_the_plugin_the_project_cannot_run(pytester):
    write_project(pytester)
    result = run(pytester)
    # No kiln_device fixture, and MLX's own factory has no Metal back-end here.
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*fixture 'kiln_device' not found*"])


def test_a_wrong_kernel_fails_under_the_plugin(pytester):
    write_project(pytester)
    pytester.makepyfile(test_wrong='''
import mlx.core as mx
import numpy as np
from kiln.testing import assert_close
from kernels import scaled_exp

def test_off_by_a_little(kiln_device):
    x = mx.random.normal((64,))
    assert_close(scaled_exp(x, 1.5), 1.5 * np.exp(np.asarray(x).astype(np.float64)) * (1 + 1e-4))
''')
    result = run(pytester, "-p", "kiln.testing", "--kiln-backends=cpu", "test_wrong.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*relative L2 error * above 1e-05 for float32*"])


def test_helpers_hold_kilns_tolerances():
    from kiln.testing import TOLERANCE, assert_close, rel_l2, tolerance

    assert TOLERANCE == {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
    assert tolerance("bfloat16") == 8e-3 and tolerance(np.float16) == 1e-3
    rng = np.random.default_rng(5)
    want = rng.normal(size=1000)
    for dtype, tol in (("float32", 1e-5), ("float16", 1e-3), ("bfloat16", 8e-3)):
        direction = rng.normal(size=1000)
        direction *= np.linalg.norm(want) / np.linalg.norm(direction)
        assert_close(want + 0.5 * tol * direction, want, dtype)
        with pytest.raises(AssertionError, match="relative L2 error"):
            assert_close(want + 2 * tol * direction, want, dtype)
    got = want.astype(np.float32)
    got[3] = np.nan
    assert rel_l2(got, want) == float("inf")
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(got, want, "bfloat16")
    with pytest.raises(AssertionError, match="int32 output differs"):
        assert_close(np.arange(4, dtype=np.int32), np.array([0, 1, 2, 4]))
    import mlx.core as mx

    assert_close(mx.array(want.astype(np.float32)).astype(mx.bfloat16), want)


# A kernel whose threads read a neighbour's slot while the neighbour clears it, with no barrier
# between: the emulator's schedule runs the reader first, so the result is right and only the
# sanitizer sees the race.
RACY_KERNELS = '''
import mlx.core as mx

_shift = mx.fast.metal_kernel(
    name="shift_add", input_names=["x"], output_names=["out"],
    source="""
        uint i = thread_position_in_threadgroup.x;
        threadgroup float slot[65];
        slot[i] = x[i];
        if (i == 0) slot[64] = 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float next = slot[i + 1];
        slot[i] = 0.0f;
        out[i] = x[i] + next;
    """)


def shift_add(x):
    return _shift(inputs=[x], grid=(64, 1, 1), threadgroup=(64, 1, 1), output_shapes=[x.shape],
                  output_dtypes=[x.dtype])[0]
'''

RACY_TESTS = '''
import mlx.core as mx
import numpy as np
import pytest

from kiln.testing import assert_close
from racy import shift_add


def want(x):
    a = np.asarray(x).astype(np.float64)
    return a + np.append(a[1:], 0.0)


def test_shift_add():
    x = mx.random.normal((64,))
    assert_close(shift_add(x), want(x))


@pytest.mark.kiln_check
def test_shift_add_marked():
    x = mx.random.normal((64,))
    assert_close(shift_add(x), want(x))
'''


def test_kiln_check_fails_a_test_whose_kernel_races_and_names_the_line(pytester):
    pytester.makepyfile(racy=RACY_KERNELS, test_racy=RACY_TESTS)
    result = run(pytester, "-p", "kiln.testing", "--kiln-backends=cpu", "--kiln-check")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*kiln check found * in the kernels this test called*",
                                 "*error[[]race[]] shift_add: *slot*", "*body line 7 | *float next = slot[[]i + 1[]];*"])


def test_without_kiln_check_only_the_marked_test_is_checked(pytester):
    pytester.makepyfile(racy=RACY_KERNELS, test_racy=RACY_TESTS)
    result = run(pytester, "-p", "kiln.testing", "--kiln-backends=cpu")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_shift_add_marked*"])


def test_kiln_check_passes_the_project_tests_of_correct_kernels(pytester):
    write_project(pytester)
    result = run(pytester, "-p", "kiln.testing", "--kiln-backends=cpu", "--kiln-check")
    result.assert_outcomes(passed=3)
