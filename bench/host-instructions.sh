#!/usr/bin/env bash
# Host instructions per cached `MetalKernel` call, without a GPU: runs `kiln bench --host-calls`
# against a stand-in driver (bench/stand-in-driver/libcuda.c, whose functions return at once)
# under callgrind, counting only the timed calls, for N and 2N calls; the difference over N is
# one call's cost. Needs valgrind, a C compiler, NVRTC (scripts/install-nvrtc.sh) and a kiln
# binary with its symbols (`cargo build --release -p kiln-cli` keeps them).
#
#   bench/host-instructions.sh [KILN_BINARY] [N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
kiln="${1:-$root/target/release/kiln}"
n="${2:-20000}"
# shellcheck source=stand-in-driver/env.sh
source "$here/stand-in-driver/env.sh"
count() {
  # The run ends with an error (the stand-in never runs the kernel, so its output is not the
  # expected value); only the count matters.
  valgrind --tool=callgrind --toggle-collect='*one_element_call*' --callgrind-out-file="$work/cg.$1" \
    "$kiln" bench --device cuda --host-calls "$1" --no-cases >/dev/null 2>&1 || true
  grep -E '^(summary|totals):' "$work/cg.$1" | head -n 1 | awk '{print $2}'
}
# A first run fills the disk cache, so that both counted runs do the same work outside the loop
# (the fixed kernels load from disk; each compiles one new kernel of the same size).
"$kiln" bench --device cuda --host-calls 10 --no-cases >/dev/null 2>&1 || true
a="$(count "$n")"
if [ "${a:-0}" -eq 0 ]; then
  echo "host-instructions: nothing counted in $kiln: it needs its symbols (a stripped binary has none)" >&2
  exit 1
fi
b="$(count $((2 * n)))"
echo "instructions per cached call: $(( (b - a) / n )) ($n against $((2 * n)) calls, $kiln)"
