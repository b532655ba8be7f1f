#!/usr/bin/env bash
# The codegen facts a race and a share need (speedgate.codegen.race_of, trace_kernels): the ladder's compiled rungs and
# the graph-break branch pairs, in four fresh processes (two after another on each of two GPUs), against the committed
# file; their reports in OUT, to compare each kernel's race between processes.
#   bash lab/device/race_facts_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}" > /dev/null
export PYTHONUNBUFFERED=1
run() {  # GPU LABEL
  env $(fresh) CUDA_VISIBLE_DEVICES=$1 timeout 170 python3 -m pytest perftests/test_compile_ladder.py \
    perftests/test_compile_graph_breaks.py -k "3-compile or 4-fp8 or branch" -p no:cacheprovider -q \
    --baseline-dir baselines --speedgate-json "$work/$2.json" > "$work/$2.log" 2>&1
  echo "== $2 on GPU $1: exit $?, $(tail -1 "$work/$2.log")"
}
( run 0 a0; run 0 a1 ) & ( run 1 b0; run 1 b1 ) & wait
