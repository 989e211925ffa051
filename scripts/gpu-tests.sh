#!/usr/bin/env bash
# Runs the CUDA variants of the test suite from prebuilt binaries (scripts/collect-test-binaries.sh
# DIR) on a machine with an NVIDIA GPU, requiring the CUDA backend so nothing silently falls back
# to the CPU, then compute-sanitizer's memcheck and racecheck when it is installed.
# The binaries find their test data in DIR/data (or in the working tree they were built from),
# so DIR may be anywhere and the current directory anything.
set -uo pipefail
dir="${1:?usage: scripts/gpu-tests.sh DIR}"
dir="$(cd "$dir" && pwd)" || exit 1
export KILN_REQUIRE_BACKEND=cuda
export KILN_MLX_HEADERS="${KILN_MLX_HEADERS:-$dir/mlx-include}"
status=0
# Every collected test binary runs its `cuda` variants, except the ones handled below.
special=" kiln nvrtc_compile golden_metal cuda_backend cuda_write_outside_buffers "
[ -d "$dir/data/golden" ] || { echo "missing $dir/data/golden (run scripts/collect-test-binaries.sh $dir)"; status=1; }
for exe in "$dir"/*; do
  t=$(basename "$exe")
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  case "$special" in *" $t "*) continue ;; esac
  out=$("$dir/$t" --include-ignored cuda 2>&1) || status=1
  echo "$t: $(grep -E '^test result' <<<"$out")"
  grep -E "FAILED|panicked" <<<"$out" | head -5
done
# NVRTC compiles of every library kernel and golden spec (no GPU needed; required, so a missing
# NVRTC fails instead of skipping), and the golden Metal sources read from the carried data.
for t in nvrtc_compile golden_metal; do
  [ -x "$dir/$t" ] || continue
  out=$(KILN_REQUIRE_BACKEND=nvrtc "$dir/$t" 2>&1) || status=1
  echo "$t: $(grep -E '^test result' <<<"$out")"
  grep -E "FAILED|panicked" <<<"$out" | head -5
done
# A kernel fault is a sticky CUDA error, so the fault test runs in a process of its own.
out=$("$dir/cuda_backend" --include-ignored --test-threads=1 --skip kernel_faults 2>&1) || status=1
echo "cuda_backend: $(grep -E '^test result' <<<"$out")"
out=$("$dir/cuda_backend" --include-ignored --exact kernel_faults_are_typed_errors 2>&1) || status=1
echo "cuda_backend kernel_faults: $(grep -E '^test result' <<<"$out")"
out=$("$dir/cuda_write_outside_buffers" --include-ignored 2>&1) || status=1
echo "cuda_write_outside_buffers: $(grep -E '^test result' <<<"$out")"
if command -v compute-sanitizer >/dev/null; then
  for t in mlx_behaviours semantics lowering_cases launch_abi attention_cuda msl_simd; do
    echo "memcheck $t: $(compute-sanitizer --tool memcheck "$dir/$t" --include-ignored cuda --test-threads=1 2>&1 | grep -E 'ERROR SUMMARY')"
  done
  for t in semantics simdgroup_matrix lowering_cases attention_cuda msl_simd; do
    echo "racecheck $t: $(compute-sanitizer --tool racecheck "$dir/$t" --include-ignored cuda --test-threads=1 2>&1 | grep -E 'RACECHECK SUMMARY')"
  done
  # The persistent attention prefill hands shared memory between its warpgroups on mbarriers
  # and named barriers.
  echo "synccheck attention_cuda: $(compute-sanitizer --tool synccheck "$dir/attention_cuda" --include-ignored cuda --test-threads=1 2>&1 | grep -E 'ERROR SUMMARY')"
fi
exit $status
