"""``python -m kiln.mlx script.py [args]`` / ``python -m kiln.mlx -m module [args]`` runs a
script or module with the MLX drop-in installed; ``python -m kiln.mlx --site`` prints the
directory to put on ``PYTHONPATH`` for ``KILN_MLX=1`` to take effect in every process."""

import os
import runpy
import sys

USAGE = "usage: python -m kiln.mlx (script.py | -m module | --site) [args...]"


def main(argv) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "--site":
        print(os.path.join(os.path.dirname(os.path.abspath(__file__)), "site"))
        return 0
    from . import install

    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
