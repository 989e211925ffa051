"""Installs the drop-in right after ``mlx.core`` is first imported, so that processes started
with ``KILN_MLX=1`` pay nothing until (and unless) they use MLX."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys


class _AfterMlxCore(importlib.abc.MetaPathFinder):
    """Finds ``mlx.core`` as the import system would and runs :func:`kiln.mlx.install` once
    its module has been executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "mlx.core":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            from . import install

            install()

        loader.exec_module = exec_then_install
        return spec


def install_on_import() -> None:
    if not any(isinstance(f, _AfterMlxCore) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterMlxCore())
