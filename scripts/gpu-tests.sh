#!/usr/bin/env bash
# Runs the CUDA variants of the test suite from prebuilt binaries (scripts/collect-test-binaries.sh
# DIR) on a machine with an NVIDIA GPU, requiring the CUDA backend so nothing silently falls back
# to the CPU, then compute-sanitizer's memcheck, racecheck and synccheck when it is installed.
# `scripts/gpu-tests.sh DIR suites` runs the tests alone, `DIR sanitizers` the sanitizer runs
# alone (the two can run side by side on one GPU); the default is both.
# The binaries find their test data in DIR/data (or in the working tree they were built from),
# so DIR may be anywhere and the current directory anything.
set -uo pipefail
dir="${1:?usage: scripts/gpu-tests.sh DIR}"
dir="$(cd "$dir" && pwd)" || exit 1
part="${2:-all}"
case "$part" in all|suites|sanitizers) ;; *) echo "unknown part $part (all, suites or sanitizers)"; exit 2 ;; esac
export KILN_REQUIRE_BACKEND=cuda
export KILN_MLX_HEADERS="${KILN_MLX_HEADERS:-$dir/mlx-include}"
status=0
# Every collected test binary runs its `cuda` variants, except the ones handled below.
special=" kiln nvrtc_compile golden_metal cuda_backend cuda_write_outside_buffers "
if [ "$part" != sanitizers ]; then
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
fi
if [ "$part" != suites ] && command -v compute-sanitizer >/dev/null; then
  # Each sanitizer run names its binary and the tests' filter; attention_cuda's prefill cases
  # take minutes each under racecheck and synccheck, so those two run its sanitizer-sized test.
  sanitize() {
    local tool=$1 t=$2 filter=$3 summary
    [ -x "$dir/$t" ] || return 0
    summary=$(compute-sanitizer --tool "$tool" "$dir/$t" --include-ignored "$filter" --test-threads=1 2>&1 \
      | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^test result')
    echo "$tool $t $filter: $(tr '\n' ' ' <<<"$summary")"
    # Clean means a zero summary and the tests themselves passed under the tool.
    grep -qE '(ERROR|RACECHECK) SUMMARY: 0 ' <<<"$summary" && grep -q '^test result: ok' <<<"$summary" || status=1
  }
  for t in mlx_behaviours semantics lowering_cases launch_abi attention_cuda msl_simd; do
    sanitize memcheck "$t" cuda
  done
  for t in semantics simdgroup_matrix lowering_cases msl_simd; do
    sanitize racecheck "$t" cuda
  done
  # The persistent attention prefill hands shared memory between its warpgroups on mbarriers
  # and named barriers.
  sanitize racecheck attention_cuda cuda_prefill_sanitizer_sized
  sanitize synccheck attention_cuda cuda_prefill_sanitizer_sized
fi
exit $status
