#!/usr/bin/env bash
# Builds the Python package as one abi3 wheel (CPython >= 3.10) for Linux x86-64 into DIR, for a
# machine without a Rust toolchain (the GPU machine): `pip install DIR/kiln_kernels-*.whl`.
# The wheel is tagged manylinux_2_34 (glibc 2.34, Ubuntu 22.04 and later; maturin checks the
# symbols it uses), else for this Linux only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:?usage: scripts/build-wheel.sh DIR}"
mkdir -p "$out"
env_dir=.deps/py-build
[ -x "$env_dir/bin/python" ] || python3 -m venv "$env_dir"
"$env_dir/bin/python" -m pip install -q --disable-pip-version-check maturin==1.9.6
"$env_dir/bin/maturin" build --release --locked --compatibility manylinux_2_34 --out "$out" \
    || "$env_dir/bin/maturin" build --release --locked --compatibility linux --out "$out"
ls "$out"/kiln_kernels-*.whl
