#!/usr/bin/env bash
# The test command: installs NVRTC from PyPI into .deps/ (so every kernel is also compiled for
# sm_90 without a GPU), then runs the whole test suite. GPU tests are ignored unless run with
# `-- --include-ignored` on a machine with an NVIDIA GPU (set KILN_REQUIRE_BACKEND=cuda there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

nvrtc_dir="$(scripts/install-nvrtc.sh)"
export LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
KILN_MLX_HEADERS="$(scripts/install-mlx-headers.sh)"; export KILN_MLX_HEADERS
# NVRTC is installed above, so the compile-only tests must not skip.
export KILN_REQUIRE_BACKEND="${KILN_REQUIRE_BACKEND:-nvrtc}"

cargo test --workspace --locked "$@"
# The benchmark scripts' merge of rounds (Python, no packages needed).
python3 bench/results/test_merge.py
