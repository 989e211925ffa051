#!/usr/bin/env bash
# The test command: installs NVRTC from PyPI into .deps/ (so every kernel is also compiled for
# sm_90 without a GPU), then runs the whole test suite: the Rust tests, then the Python package's
# pytest tests (the package is built into a virtual environment under .deps/py-venv). GPU tests are ignored unless run with
# `-- --include-ignored` on a machine with an NVIDIA GPU (set KILN_REQUIRE_BACKEND=cuda there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

nvrtc_dir="$(scripts/install-nvrtc.sh)"
export LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
KILN_MLX_HEADERS="$(scripts/install-mlx-headers.sh)"; export KILN_MLX_HEADERS
# NVRTC is installed above, so the compile-only tests must not skip.
export KILN_REQUIRE_BACKEND="${KILN_REQUIRE_BACKEND:-nvrtc}"

cargo test --workspace --locked "$@"
# The Rust API's example programs (crates/kiln/examples): each checks its result and exits
# non-zero on a mismatch. `cargo test` built them above.
for example in crates/kiln/examples/*.rs; do
    cargo run --quiet --locked -p kiln --example "$(basename "$example" .rs)"
done
# The benchmark scripts' merge of rounds (Python, no packages needed).
python3 bench/results/test_merge.py

# The Python package: NumPy, ml_dtypes and DLPack in CI, MLX's CPU wheel with mlx-lm (its kernels
# run through kiln.mlx; mlx-lm imports transformers), and PyTorch on the CPU (its CUDA tests skip
# without a GPU; the GPU machine runs them with KILN_REQUIRE_BACKEND=cuda, where a skip fails).
py_env=.deps/py-venv
[ -x "$py_env/bin/python" ] || python3 -m venv "$py_env"
"$py_env/bin/python" -m pip install -q --disable-pip-version-check \
    maturin==1.9.6 numpy==2.3.5 ml_dtypes==0.5.4 pytest==8.4.2 hypothesis==6.170.17 mlx==0.32.4 "mlx-cpu==0.32.4; sys_platform == 'linux'" mlx-lm==0.32.2 transformers==5.24.0
# PyTorch (PyPI's Linux wheel with its CUDA libraries, about 5 GB; it runs on CPU-only machines).
"$py_env/bin/python" -m pip install -q --disable-pip-version-check torch==2.15.0
# A dev-profile build shares the kiln crate the Rust tests just built.
VIRTUAL_ENV="$PWD/$py_env" "$py_env/bin/maturin" develop --locked --quiet
"$py_env/bin/python" -m pytest python/tests -q -p no:cacheprovider
