#!/usr/bin/env bash
# Installs NVRTC (CUDA 13.0, from PyPI's nvidia-cuda-nvrtc wheel) into .deps/nvrtc so kernels can
# be compiled to cubin on machines without a GPU or a CUDA toolkit. Prints the library directory;
# point the tests at it with
#   export LD_LIBRARY_PATH="$(scripts/install-nvrtc.sh):$LD_LIBRARY_PATH"
# or name the library itself with KILN_NVRTC_LIBRARY (see crates/kiln/src/config.rs).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.deps/nvrtc"
python="${PYTHON:-python3}"

find_lib() {
    find "$dest/" -name 'libnvrtc.so*' -not -name '*builtins*' -print 2>/dev/null | sort | head -n 1
}

if [ -z "$(find_lib)" ]; then
    mkdir -p "$dest"
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$dest" 'nvidia-cuda-nvrtc==13.0.*' >&2
fi

lib="$(find_lib)"
if [ -z "$lib" ]; then
    echo "install-nvrtc: libnvrtc.so not found under $dest after installation" >&2
    exit 1
fi
dirname "$lib"
