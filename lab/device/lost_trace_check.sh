#!/usr/bin/env bash
# lab/lost_trace_probe.py on a host with two GPUs, side by side: on GPU 0 as the audit traces today, on GPU 1 with
# queued_ahead's tries settled too (--between-tries); each with empty caches, PAIRS pairs (default 20) per settle.
#   bash lab/device/lost_trace_check.sh OUT      OUT/probe.tgz: each process's JSON and log
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:-}"
for gpu in 0 1; do
  ( env $(fresh) CUDA_VISIBLE_DEVICES=$gpu timeout 240 python3 -m lab.lost_trace_probe "$work/gpu$gpu.json" \
      --pairs "${PAIRS:-20}" $( (( gpu == 1 )) && echo --between-tries) > "$work/gpu$gpu.log" 2>&1
    echo "== GPU $gpu: exit $?" >> "$work/summary.txt"; grep "^settle" "$work/gpu$gpu.log" >> "$work/summary.txt" ) &
done
wait
cat "$work/summary.txt"
tar czf /tmp/lost-trace.tgz -C "$work" . && mv /tmp/lost-trace.tgz "$work/probe.tgz"
