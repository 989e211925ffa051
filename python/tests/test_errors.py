"""kiln's errors as Python exceptions naming the kernel; faults and Ctrl-C never end the
interpreter."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import kiln


def test_the_hierarchy_is_under_kilnerror():
    for cls in (kiln.InvalidArgumentError, kiln.ShapeMismatchError, kiln.UnsupportedDTypeError, kiln.CompileError,
                kiln.BackendUnavailableError, kiln.DriverError, kiln.TimeoutError, kiln.KernelFaultError):
        assert issubclass(cls, kiln.KilnError)
    assert issubclass(kiln.InvalidArgumentError, ValueError)
    assert issubclass(kiln.UnsupportedDTypeError, TypeError)
    assert issubclass(kiln.TimeoutError, TimeoutError)


def test_a_call_takes_mlx_keywords_only_and_names_what_is_wrong(rng):
    import inspect

    k = kiln.metal_kernel("twice", ["x"], ["out"], "uint i = thread_position_in_grid.x; out[i] = 2 * x[i];")
    x = rng.normal(size=4).astype(np.float32)
    keywords = dict(inputs=[x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1),
                    threadgroup=(4, 1, 1))
    params = inspect.signature(k).parameters
    assert list(params) == ["inputs", "output_shapes", "output_dtypes", "grid", "threadgroup", "template",
                            "init_value", "verbose", "stream", "device", "timeout"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert params["verbose"].default is False and params["template"].default is None
    with pytest.raises(TypeError, match="MetalKernel.*threadgroup"):
        k(**{n: v for n, v in keywords.items() if n != "threadgroup"})
    with pytest.raises(TypeError, match="MetalKernel.*positional"):
        k([x], [(4,)], [np.float32], (4, 1, 1), (4, 1, 1))
    with pytest.raises(TypeError, match="MetalKernel.*grids"):
        k(**keywords, grids=(4, 1, 1))
    (out,) = k(**keywords)
    np.testing.assert_array_equal(out, 2 * x)


def test_compile_errors_name_the_kernel_and_the_users_line(rng):
    k = kiln.metal_kernel("broken_kernel", ["a"], ["out"], "uint i = thread_position_in_grid.x;\nout[i] = undefined_thing;")
    with pytest.raises(kiln.CompileError) as e:
        k(inputs=[rng.normal(size=4).astype(np.float32)], output_shapes=[(4,)], output_dtypes=[np.float32],
          grid=(4, 1, 1), threadgroup=(4, 1, 1))
    assert "broken_kernel" in str(e.value) and "undefined_thing" in str(e.value)
    # The hint is the Python way to read the generated unit, not a CLI command.
    assert "kernel.translate(" in str(e.value) and "kiln translate" not in str(e.value), str(e.value)


def test_translate_shows_each_targets_source_and_names_a_bad_target(rng):
    k = kiln.metal_kernel("scale_by_three", ["a"], ["out"], "uint i = thread_position_in_grid.x;\nout[i] = 3.0f * a[i];")
    call = dict(inputs=[rng.normal(size=4).astype(np.float32)], output_shapes=[(4,)], output_dtypes=[np.float32])
    metal, cpu, cuda = (k.translate(**call, target=t) for t in ("metal", "cpu", "cuda"))
    assert metal == k.generate(**call)
    for text in (metal, cpu, cuda):
        assert "3.0f * a[i]" in text
    assert "__global__" in cuda and "__global__" not in cpu and "[[kernel]]" in metal
    with pytest.raises(kiln.InvalidArgumentError, match="scale_by_three.*target must be"):
        k.translate(**call, target="hip")
    lib = kiln.metal_library("scaled", "#include <metal_stdlib>\nusing namespace metal;\n"
                             "kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                             "{ x[i] = 2.0f * x[i]; }\n")
    assert "__global__" in lib.translate("twice", target="cuda") and "2.0f * x[i]" in lib.translate("twice")
    with pytest.raises(kiln.InvalidArgumentError, match="scaled:twice.*target must be"):
        lib.translate("twice", target="ptx")


def test_unsupported_dtypes_are_type_errors(rng):
    k = kiln.metal_kernel("f64", ["a"], ["out"], "out[0] = a[0];")
    with pytest.raises(kiln.UnsupportedDTypeError, match="float64"):
        k(inputs=[rng.normal(size=4)], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
          threadgroup=(1, 1, 1))
    with pytest.raises(kiln.UnsupportedDTypeError):
        k(inputs=[np.ones(4, np.float32)], output_shapes=[(1,)], output_dtypes=[np.complex64], grid=(1, 1, 1),
          threadgroup=(1, 1, 1))


def test_oversized_threadgroups_are_invalid_arguments(rng):
    k = kiln.metal_kernel("big_group", ["a"], ["out"], "out[0] = a[0];")
    with pytest.raises(kiln.InvalidArgumentError, match="big_group"):
        k(inputs=[np.ones(4, np.float32)], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(2048, 1, 1),
          threadgroup=(2048, 1, 1))


def test_an_out_of_bounds_write_is_a_fault_naming_the_output_and_kiln_goes_on(rng):
    a = rng.normal(size=16).astype(np.float32)
    k = kiln.metal_kernel("overrun", ["a"], ["out"], "uint i = thread_position_in_grid.x; out[i + 100] = a[i];")
    with pytest.raises(kiln.KernelFaultError, match="overrun.*output `out`"):
        k(inputs=[a], output_shapes=[(16,)], output_dtypes=[np.float32], grid=(16, 1, 1), threadgroup=(16, 1, 1))
    ok = kiln.metal_kernel("after_overrun", ["a"], ["out"], "uint i = thread_position_in_grid.x; out[i] = -a[i];")
    (out,) = ok(inputs=[a], output_shapes=[(16,)], output_dtypes=[np.float32], grid=(16, 1, 1), threadgroup=(16, 1, 1))
    np.testing.assert_array_equal(out, -a)


def test_a_wild_read_is_a_fault_not_a_crash(rng):
    k = kiln.metal_kernel("wild", ["a"], ["out"], "out[0] = a[1ull << 40];")
    with pytest.raises(kiln.KernelFaultError, match="wild"):
        k(inputs=[np.ones(16, np.float32)], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
          threadgroup=(1, 1, 1))


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test: a process a shell started in the background
    inherits SIGINT ignored, and Python then installs none."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("restored", [False, True])
def test_ctrl_c_stops_a_long_cpu_kernel(rng, python_sigint, restored):
    if restored:
        # After a launch put kiln's handler in front, the program saves and restores its own
        # (the same Python handler object, reinstalled over kiln's): the next launch still stops.
        quick = kiln.metal_kernel("before_restore", ["a"], ["out"], "out[0] = a[0];")
        quick(inputs=[np.ones(4, np.float32)], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
              threadgroup=(1, 1, 1))
        signal.signal(signal.SIGINT, signal.getsignal(signal.SIGINT))
    k = kiln.metal_kernel("forever", ["a"], ["out"], """
        uint i = thread_position_in_grid.x;
        float x = a[i];
        while (x == x) { x = x * 1.0000001f + 1.0f; if (x > 1e30f) x = 0.0f; }
        out[i] = x;
    """)
    a = rng.normal(size=64).astype(np.float32)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            # The timeout ends the test should the interrupt be lost.
            k(inputs=[a], output_shapes=[(64,)], output_dtypes=[np.float32], grid=(64, 1, 1), threadgroup=(32, 1, 1),
              timeout=60)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 30, "the kernel stopped soon after the interrupt"
    # The kernel library still runs afterwards.
    ok = kiln.metal_kernel("after_interrupt", ["a"], ["out"], "uint i = thread_position_in_grid.x; out[i] = a[i] + 1;")
    (out,) = ok(inputs=[a], output_shapes=[(64,)], output_dtypes=[np.float32], grid=(64, 1, 1), threadgroup=(64, 1, 1))
    np.testing.assert_array_equal(out, a + 1)


def test_after_a_cpu_kernel_ctrl_c_reaches_python_as_before(rng, python_sigint):
    # A CPU launch on the main thread puts a handler in front of Python's SIGINT handler for its
    # duration only: afterwards a Ctrl-C is Python's KeyboardInterrupt again, and a Python handler
    # the program installs is what a Ctrl-C during a kernel reaches (the kernel is stopped).
    k = kiln.metal_kernel("plus_one_then_signal", ["a"], ["out"],
                          "uint i = thread_position_in_grid.x; out[i] = a[i] + 1;")
    a = rng.normal(size=64).astype(np.float32)
    for _ in range(3):
        (out,) = k(inputs=[a], output_shapes=[(64,)], output_dtypes=[np.float32], grid=(64, 1, 1),
                   threadgroup=(32, 1, 1))
        np.testing.assert_array_equal(out, a + 1)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *_: seen.append(1))
    forever = kiln.metal_kernel("forever_custom_handler", ["a"], ["out"], """
        uint i = thread_position_in_grid.x;
        float x = a[i];
        while (x == x) { x = x * 1.0000001f + 1.0f; if (x > 1e30f) x = 0.0f; }
        out[i] = x;
    """)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            forever(inputs=[a], output_shapes=[(64,)], output_dtypes=[np.float32], grid=(64, 1, 1),
                    threadgroup=(32, 1, 1), timeout=60)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert seen == [1], "the program's own handler saw the Ctrl-C once"


def test_cuda_unavailable_is_reported_not_raised_at_import():
    available = kiln.cuda_available()
    assert isinstance(available, bool)
    if not available:
        assert kiln.cuda_status()
        with pytest.raises(kiln.BackendUnavailableError):
            k = kiln.metal_kernel("needs_gpu", ["a"], ["out"], "out[0] = a[0];")
            k(inputs=[np.ones(4, np.float32)], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
              threadgroup=(1, 1, 1), device="cuda:0")


def test_nvrtc_is_found_where_the_test_command_installed_it():
    import importlib.util
    import os

    required = os.environ.get("KILN_REQUIRE_BACKEND") in ("nvrtc", "cuda")
    if not required and importlib.util.find_spec("nvidia") is None:
        pytest.skip("no NVRTC installed for this run")
    major, minor = kiln.nvrtc_version()
    assert major >= 12
