"""NVRTC from the ``nvidia-cuda-nvrtc`` wheel: when it is installed and no NVRTC was named
(``KILN_NVRTC_LIBRARY``), its library is loaded with global visibility before kiln first looks
for NVRTC, so the lookup by soname finds it — as ``KILN_NVRTC_LIBRARY`` would."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os


def _wheel_dirs():
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    dirs = []
    for root in spec.submodule_search_locations:
        dirs += sorted(glob.glob(os.path.join(root, "cu1*", "lib")), reverse=True)
        dirs.append(os.path.join(root, "cuda_nvrtc", "lib"))
    return [d for d in dirs if os.path.isdir(d)]


def preload() -> str | None:
    """Loads the wheel's NVRTC; returns its path, or None when there is none to load."""
    if os.environ.get("KILN_NVRTC_LIBRARY"):
        return None
    for d in _wheel_dirs():
        libs = sorted(p for p in glob.glob(os.path.join(d, "libnvrtc.so*")) if not p.endswith(".alt"))
        if not libs:
            continue
        try:
            for builtins in glob.glob(os.path.join(d, "libnvrtc-builtins.so*")):
                if not builtins.endswith(".alt"):
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)
            return libs[0]
        except OSError:
            continue
    return None
