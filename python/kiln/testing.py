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
"""

from __future__ import annotations

import os

import numpy as np
import pytest

# Relative L2 error allowed per dtype: kiln's table (crates/kiln/src/check.rs).
TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}

__all__ = ["TOLERANCE", "tolerance", "rel_l2", "assert_close", "backends", "kiln_device"]


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


def pytest_configure(config):
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return
    from . import mlx as kiln_mlx

    kiln_mlx.install()


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
