#!/usr/bin/env bash
# Installs MLX's Metal kernel headers (MLX 0.32.4, from PyPI's mlx-metal wheel for macOS, which
# the mlx wheel depends on there) into .deps/mlx-headers, for the tests that build kernels on
# MLX's own `steel` GEMM headers. Only the include tree is kept. Prints the include directory
# (the one holding mlx/backend/metal/kernels/); point the tests at it with
#   export KILN_MLX_HEADERS="$(scripts/install-mlx-headers.sh)"
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.deps/mlx-headers"
include="$dest/mlx/include"
marker="$include/mlx/backend/metal/kernels/steel/gemm/gemm.h"
python="${PYTHON:-python3}"

if [ ! -f "$marker" ]; then
    download="$(mktemp -d)"
    trap 'rm -rf "$download"' EXIT
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform macosx_14_0_arm64 --python-version 3.12 --dest "$download" 'mlx-metal==0.32.4' >&2
    mkdir -p "$dest"
    "$python" - "$download" "$dest" <<'PY'
import pathlib, sys, zipfile
download, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in download.glob("mlx_metal-*.whl"):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest, [n for n in z.namelist() if n.startswith("mlx/include/")])
PY
fi

if [ ! -f "$marker" ]; then
    echo "install-mlx-headers: $marker not found after installation" >&2
    exit 1
fi
echo "$include"
