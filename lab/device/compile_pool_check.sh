#!/usr/bin/env bash
# The in-process compile seconds and inductor's compile workers (lab/compile_pool_probe.py) on a host with two
# GPUs: the suite as it was (no wake) on GPU 0 and with wake_compile_workers on GPU 1, side by side; then the workers
# kept (no quiesce) on GPU 0 while GPU 1 gates the attention case whose vs_compile read 4% slow in one clean run.
#   bash lab/device/compile_pool_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:-}"
probe() { env $(fresh) CUDA_VISIBLE_DEVICES=$1 timeout 240 python3 -m lab.compile_pool_probe "$work/$2.json" "${@:3}" > "$work/$2.log" 2>&1
          echo "== $2 (GPU $1): exit $?" >> "$work/summary.txt"; grep '^{' "$work/$2.log" >> "$work/summary.txt"; }
probe 0 plain & probe 1 wake --wake & wait
probe 0 keep --keep-workers &
( env $(fresh) CUDA_VISIBLE_DEVICES=1 timeout 240 python3 -m pytest perftests/test_triton_attention.py -p no:cacheprovider -q \
    -k "test_flash_attention and 2048-128-causal" --baseline-dir baselines --speedgate-json "$work/attention.json" > "$work/attention.log" 2>&1
  echo "== attention (GPU 1): exit $?" >> "$work/summary.txt"; grep -E "::vs_" "$work/attention.log" | grep -E "x +[0-9]" | cut -c1-230 >> "$work/summary.txt" ) &
wait
cat "$work/summary.txt"
