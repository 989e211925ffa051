#!/usr/bin/env bash
# Host instructions per cached `kiln.metal_kernel` call from Python on (stand-in) CUDA tensors,
# without a GPU: bench/python_host_instructions.py under callgrind against the stand-in driver
# (bench/stand-in-driver), counting only its timed loop, for N and 2N calls; the difference over
# N is one call's cost (Python glue, kiln's binding and kiln's launch path). Needs valgrind, a C
# compiler, NVRTC (scripts/install-nvrtc.sh) and kiln built into the Python environment.
#
#   bench/python-host-instructions.sh [PYTHON] [N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
python="${1:-$root/.deps/py-venv/bin/python}"
n="${2:-2000}"
# shellcheck source=stand-in-driver/env.sh
source "$here/stand-in-driver/env.sh"
"$python" "$here/python_host_instructions.py" 10
count() {
  # Only the loop runs inside `exec` after the imports (which also use it, equally in both runs).
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect='builtin_exec' \
    --callgrind-out-file="$work/cg.$1" "$python" "$here/python_host_instructions.py" "$1" >/dev/null 2>&1
  grep -E '^(summary|totals):' "$work/cg.$1" | head -n 1 | awk '{print $2}'
}
a="$(count "$n")"
b="$(count $((2 * n)))"
echo "instructions per cached call from Python: $(( (b - a) / n )) ($n against $((2 * n)) calls)"
