"""Linux CI for Metal kernels: a pytest plugin that runs a project's existing kernel tests (the
ones that call ``mx.fast.metal_kernel``) on kiln's CPU emulator, and on CUDA where present.

One line of configuration: ``pytest -p kiln.testing``, or in the top-level ``conftest.py``::

    pytest_plugins = ["kiln.testing"]

The plugin installs :mod:`kiln.mlx` (where MLX has no Metal back-end) before the tests are
collected, so kernels built at import time are kiln's. It provides:

- ``kiln_device``: a fixture parametrized over the backends present (``"cpu"``, and ``"cuda:0"``
  where kiln reaches a GPU; with ``KILN_REQUIRE_BACKEND=cuda`` a missing GPU fails instead of
  dropping the parameter). MLX kernel calls inside the test run there (MLX CPU arrays are copied
  to the GPU and back); use the value as ``device=`` for ``kiln.metal_kernel`` calls on NumPy.
- ``assert_close(got, want, dtype=None)`` / ``rel_l2(got, want)`` / ``tolerance(dtype)``: a
  kernel against a reference under kiln's dtype tolerances (relative L2: float32 1e-5, float16
  1e-3, bfloat16 8e-3; a NaN never passes), for MLX arrays, NumPy arrays and PyTorch tensors.
- ``--kiln-backends=cpu,cuda`` narrows the backends ``kiln_device`` runs.
- ``--kiln-check`` (or ``@pytest.mark.kiln_check`` on a test) runs every kiln kernel call of a
  test (``mx.fast.metal_kernel`` kernels, ``kiln.metal_kernel``, ``MetalLibrary.dispatch``) under
  kiln's sanitizer as well, on the CPU emulator, before the call itself: a test whose kernels
  have errors (races, uninitialised reads, unwritten outputs, barrier divergence, out-of-bounds
  accesses) fails with the findings on the kernels' lines; warnings are reported as pytest
  warnings.
"""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import pytest

# Relative L2 error allowed per dtype: kiln's table (crates/kiln/src/check.rs).
TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}

__all__ = ["TOLERANCE", "tolerance", "rel_l2", "assert_close", "backends", "kiln_device", "KilnCheckWarning"]


class KilnCheckWarning(UserWarning):
    """A sanitizer warning on a kernel a test called under ``--kiln-check``."""


def _float64(a) -> np.ndarray:
    """Any array (MLX, NumPy, PyTorch, lists) as a float64 NumPy array."""
    module = type(a).__module__ or ""
    if module.startswith("mlx"):
        import mlx.core as mx

        if a.dtype == mx.bfloat16:
            a = a.astype(mx.float32)
        return np.asarray(a).astype(np.float64)
    if module.startswith("torch"):
        return a.detach().to("cpu").double().numpy()
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        a = a.astype(np.float32)
    return a.astype(np.float64)


def _dtype_name(a) -> str | None:
    from ._dtypes import dtype_name

    dtype = getattr(a, "dtype", None)
    if dtype is None:
        return None
    try:
        return dtype_name(dtype)
    except Exception:
        return None


def tolerance(dtype) -> float:
    """The relative L2 error allowed for ``dtype`` (float32, float16, bfloat16, any spelling)."""
    from ._dtypes import dtype_name

    name = dtype_name(dtype)
    if name not in TOLERANCE:
        raise ValueError(f"[kiln.testing] no tolerance for {name}: compare integer outputs exactly")
    return TOLERANCE[name]


def rel_l2(got, want) -> float:
    """‖got − want‖ / ‖want‖ in float64; infinite when ``got`` holds a NaN or the shapes
    differ, so a NaN never passes."""
    g, w = _float64(got), _float64(want)
    if g.shape != w.shape or np.isnan(g).any():
        return float("inf")
    return float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))


def assert_close(got, want, dtype=None) -> None:
    """Asserts that ``got`` (a kernel's output) matches ``want`` (a reference, ideally float64)
    under the tolerance of ``dtype`` (by default ``got``'s dtype). Integer and bool outputs
    must match exactly."""
    from ._dtypes import dtype_name

    name = _dtype_name(got) if dtype is None else dtype_name(dtype)
    g, w = _float64(got), _float64(want)
    if g.shape != w.shape:
        raise AssertionError(f"shape {g.shape} != reference shape {w.shape}")
    if np.isnan(g).any():
        raise AssertionError(f"NaN in the output at {np.argwhere(np.isnan(g))[:5].tolist()}")
    if name not in TOLERANCE:
        if not np.array_equal(g, w):
            bad = np.argwhere(g != w)[:5].tolist()
            raise AssertionError(f"{name} output differs from the reference at {bad}")
        return
    err = rel_l2(g, w)
    if err > TOLERANCE[name]:
        raise AssertionError(f"relative L2 error {err:.3g} above {TOLERANCE[name]} for {name}")


def backends(config=None) -> list[str]:
    """The devices the ``kiln_device`` fixture runs: ``"cpu"``, and ``"cuda:0"`` where kiln
    reaches a GPU (or where ``KILN_REQUIRE_BACKEND=cuda`` insists on one)."""
    import kiln

    wanted = None
    if config is not None:
        option = config.getoption("kiln_backends", default=None)
        if option:
            wanted = {b.strip() for b in option.split(",") if b.strip()}
    found = ["cpu"]
    if kiln.cuda_available() or os.environ.get("KILN_REQUIRE_BACKEND", "") == "cuda":
        found.append("cuda:0")
    if wanted is not None:
        found = [d for d in found if d.split(":")[0] in wanted]
    return found


def pytest_addoption(parser):
    group = parser.getgroup("kiln")
    group.addoption("--kiln-backends", default=None,
                    help="comma-separated kiln backends for the kiln_device fixture (cpu, cuda); default: all present")
    group.addoption("--kiln-check", action="store_true", default=False,
                    help="run every kiln kernel call of the tests under kiln's sanitizer as well, and fail a test "
                         "whose kernels have errors (the marker kiln_check does this for one test)")


def pytest_configure(config):
    config.addinivalue_line("markers", "kiln_check: run the test's kiln kernel calls under kiln's sanitizer as well "
                                       "(as --kiln-check does for every test)")
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return
    from . import mlx as kiln_mlx

    kiln_mlx.install()


def pytest_collection_modifyitems(config, items):
    everywhere = config.getoption("kiln_check", default=False)
    for item in items:
        # Plain test functions only (unittest cases run their own way).
        if type(item) is not pytest.Function:
            continue
        if everywhere or item.get_closest_marker("kiln_check") is not None:
            item.obj = _checked(item.obj)


def _checked(test):
    """``test`` with every kiln kernel call inside run under the sanitizer too: errors fail it."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        from ._check import checking, render

        with checking() as found:
            result = test(*args, **kwargs)
        seen, errors = set(), []
        for f in found:
            key = (f.get("kernel"), f.get("kind"), f.get("severity"), f.get("line"), f.get("other_line"))
            if key in seen:
                continue
            seen.add(key)
            if f.get("severity") == "error":
                errors.append(render(f))
            else:
                warnings.warn(KilnCheckWarning(render(f)), stacklevel=2)
        if errors:
            noun = "error" if len(errors) == 1 else "errors"
            pytest.fail(f"kiln check found {len(errors)} {noun} in the kernels this test called:\n\n"
                        + "\n\n".join(errors), pytrace=False)
        return result

    return run


def pytest_generate_tests(metafunc):
    if "kiln_device" in metafunc.fixturenames:
        devices = backends(metafunc.config)
        metafunc.parametrize("kiln_device", devices, ids=[d.split(":")[0] for d in devices], indirect=True)


@pytest.fixture
def kiln_device(request):
    """A kiln device name (``"cpu"`` or ``"cuda:N"``); MLX kernel calls in the test run there."""
    import kiln

    device = getattr(request, "param", "cpu")
    if device != "cpu" and not kiln.cuda_available():
        pytest.fail(f"KILN_REQUIRE_BACKEND=cuda but kiln cannot reach CUDA: {kiln.cuda_status()}")
    try:
        from . import mlx as kiln_mlx
    except ImportError:
        yield device
        return
    # "cpu" leaves MLX arrays on their own device; "cuda:N" runs MLX CPU arrays' kernels there.
    with kiln_mlx.use_device(None if device == "cpu" else device):
        yield device
