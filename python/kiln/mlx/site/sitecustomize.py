"""kiln's MLX drop-in for processes kiln does not start: with this directory on ``PYTHONPATH``
(``python -m kiln.mlx --site`` prints it) and ``KILN_MLX=1``, the drop-in is installed when the
process first imports ``mlx.core``. Any other ``sitecustomize`` later on the path still runs."""

import importlib.machinery
import importlib.util
import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain_next_sitecustomize()
try:
    from kiln.mlx import _install_from_environment
except ImportError:  # kiln is not installed in this interpreter
    pass
else:
    _install_from_environment()
