#!/usr/bin/env bash
# One command for the results page: on a machine with an NVIDIA GPU, from binaries built
# elsewhere (scripts/collect-test-binaries.sh BIN), runs the GPU conformance tests that guard the
# benchmarked kernels, the host-cost measurement twice (cold, then warm disk cache), every bench
# case with kiln, the same cases with the peers (bench/peers.py: torch eager, torch.compile, FLA
# where importable), a second round of the memory-bound cases (GDN kkt among them) on both
# sides (their ratios sit within the run-to-run spread, and a peer's round can be slow:
# bench/results/merge.py keeps each side's faster round), the comparison, and renders the page.
#
#   bench/run-h100.sh BIN OUTDIR COMMIT
#
# Writes OUTDIR/{kiln.json,peers.json,host1.host.json,host2.host.json,results.md,log.txt} and
# the rounds kiln.json and peers.json merge, OUTDIR/{kiln,peers}.round{1,2}.json.
# Needs NVRTC on LD_LIBRARY_PATH (or KILN_NVRTC_LIBRARY) and python3 with torch.
set -uo pipefail
bin="${1:?usage: bench/run-h100.sh BIN OUTDIR COMMIT}"
out="${2:?usage: bench/run-h100.sh BIN OUTDIR COMMIT}"
commit="${3:?usage: bench/run-h100.sh BIN OUTDIR COMMIT}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
export KILN_REQUIRE_BACKEND=cuda
export KILN_CACHE_DIR="${KILN_CACHE_DIR:-$(mktemp -d)}"
log="$out/log.txt"
: >"$log"
status=0
# Marks each step's start in the log, so a slow step shows.
step() { echo "[$(date +%T)] $*" >>"$log"; }

step tests
tests=""
for t in ops_memory_bound ops_compute attention_cuda gdn_kkt_cuda scatter_add_cuda; do
  r=$("$bin/$t" --include-ignored cuda 2>&1) || status=1
  line="$t: $(grep -E '^test result' <<<"$r")"
  echo "$line" | tee -a "$log"
  grep -E "FAILED|panicked" <<<"$r" | head -5 | tee -a "$log"
  tests="$tests\n#   $line"
done

step host cost
"$bin/kiln" bench --device cuda --host-calls 100000 --no-cases --json "$out/host1.json" 2>&1 | tee -a "$log"
"$bin/kiln" bench --device cuda --host-calls 100000 --no-cases --json "$out/host2.json" 2>&1 | tee -a "$log"
memory_bound="exp/,silu/,gelu_tanh/,rms_norm/,softmax/,rope/,scatter_add/,gdn_kkt/"
step kiln round 1
"$bin/kiln" bench --device cuda --json "$out/kiln.round1.json" --commit "$commit" --time-per-case 0.1 >>"$log" 2>&1 || status=1
step peers round 1
"$bin/kiln" bench --list-json >"$out/cases.json"
python3 "$here/peers.py" --cases "$out/cases.json" --out "$out/peers.round1.json" --time-per-case 0.1 >>"$log" 2>&1 || status=1
step kiln round 2
"$bin/kiln" bench --device cuda --filter "$memory_bound" --json "$out/kiln.round2.json" --commit "$commit" \
  --time-per-case 0.1 >>"$log" 2>&1 || status=1
step peers round 2
python3 "$here/peers.py" --cases "$out/cases.json" --filter "$memory_bound" --out "$out/peers.round2.json" --time-per-case 0.1 >>"$log" 2>&1 || status=1
step merge and render
python3 "$here/results/merge.py" "$out/kiln.json" "$out/kiln.round1.json" "$out/kiln.round2.json" || status=1
python3 "$here/results/merge.py" "$out/peers.json" "$out/peers.round1.json" "$out/peers.round2.json" || status=1
"$bin/kiln" bench --report "$out/kiln.json" --compare "$out/peers.json" 2>&1 | tee -a "$log"

cat >"$out/command.txt" <<EOF
# Built from commit $commit: scripts/collect-test-binaries.sh BIN. On the GPU machine (NVRTC on
# LD_LIBRARY_PATH, torch installed, fla-core where available), one command:
bench/run-h100.sh BIN OUT $commit
# which runs, in this order: the CUDA tests of the benchmarked ops,$(printf "$tests")
# kiln bench --device cuda --host-calls 100000 --no-cases --json host1.json   # run 1: cold disk cache
# kiln bench --device cuda --host-calls 100000 --no-cases --json host2.json   # run 2: disk-cache hits
# kiln bench --device cuda --json kiln.round1.json --commit $commit --time-per-case 0.1
# kiln bench --list-json > cases.json
# python3 bench/peers.py --cases cases.json --out peers.round1.json --time-per-case 0.1
# kiln bench --device cuda --filter $memory_bound --json kiln.round2.json --commit $commit --time-per-case 0.1
# python3 bench/peers.py --cases cases.json --filter $memory_bound --out peers.round2.json --time-per-case 0.1
# python3 bench/results/merge.py kiln.json kiln.round1.json kiln.round2.json    # each case: the faster round
# python3 bench/results/merge.py peers.json peers.round1.json peers.round2.json
# kiln bench --report kiln.json --compare peers.json
# python3 bench/results/render.py kiln.json peers.json host1.host.json host2.host.json command.txt
EOF
python3 "$here/results/render.py" "$out/kiln.json" "$out/peers.json" "$out/host1.host.json" \
  "$out/host2.host.json" "$out/command.txt" >"$out/results.md" || status=1
exit $status
