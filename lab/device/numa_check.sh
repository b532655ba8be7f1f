#!/usr/bin/env bash
# Are a latency-timed case's two host states the launching core's distance from the GPU (issue 46; the graph-break
# pairs' sides doubled together in some gate runs, docs/results/gate-study-h200.md)? lab.drift_probe on GPU 0, one
# probe after another: the graph-break pair (branch_cond) and the training step, each on any core (as the gate runs),
# on the cores near the GPU, on the far ones; then the graph-break pair on any core and near, each while GPU 1 runs the
# FlexAttention file's compiles (what -n 2 puts beside it). The host's topology first.
#   bash lab/device/numa_check.sh OUT      OUT/summary.txt, OUT/<probe>.log and OUT/<probe>/drift-<case>.json
# ROUNDS (default 600) for the graph-break pair, TRAIN_ROUNDS (default 150) for the training step.
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:-}"
export PYTHONUNBUFFERED=1
{ lscpu | grep -E "^(CPU\(s\)|Model name|Socket|Core|Thread|NUMA)"; nvidia-smi topo -m; } >> "$work/summary.txt" 2>&1
probe() {  # LABEL CASE ROUNDS CPUS
  env $(fresh) CUDA_VISIBLE_DEVICES=0 timeout -k 10 150 python3 -m lab.drift_probe "$work/$1" --case "$2" --rounds "$3" \
    --window 50 --cpus "$4" > "$work/$1.log" 2>&1
  { echo "== $1 ($2, --cpus $4): exit $?"; grep -E "^(GPU|rounds|graph_break|training)" "$work/$1.log" | cut -c1-260; } >> "$work/summary.txt"
}
rounds=${ROUNDS:-600}
for cpus in any near far; do probe "gb-$cpus" graph_break "$rounds" "$cpus"; done
for cpus in any near far; do probe "train-$cpus" training "${TRAIN_ROUNDS:-150}" "$cpus"; done
for cpus in any near; do
  ( env $(fresh) CUDA_VISIBLE_DEVICES=1 timeout 150 python3 -m pytest perftests/test_compile_flex.py -p no:cacheprovider -q \
      --baseline-dir baselines > "$work/neighbor-$cpus.log" 2>&1 ) &
  sleep 8  # the neighbor's import and first compile under way
  probe "gb-$cpus-beside-compiles" graph_break "$rounds" "$cpus"
  wait
  echo "== neighbor: $(tail -1 "$work/neighbor-$cpus.log")" >> "$work/summary.txt"
done
cat "$work/summary.txt"
