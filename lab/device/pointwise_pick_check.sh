#!/usr/bin/env bash
# lab/pointwise_pick_probe.py on a host with two GPUs: on each card, fresh processes (empty caches) alternating the
# suite's vs_compile options with pointwise autotuning on and held; ROUNDS pairs per card (default 2).
#   bash lab/device/pointwise_pick_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:-}"
card() {
  for round in $(seq "${ROUNDS:-2}"); do
    for mode in tuned hold; do
      env $(fresh) CUDA_VISIBLE_DEVICES=$1 timeout 120 python3 -m lab.pointwise_pick_probe "$work/gpu$1-$mode-$round.json" \
        $([[ $mode == hold ]] && echo --hold) > "$work/gpu$1-$mode-$round.log" 2>&1
      echo "== GPU $1 $mode $round: exit $?"; grep '^{' "$work/gpu$1-$mode-$round.log" | cut -c1-400
    done
  done
}
card 0 > "$work/gpu0.txt" & card 1 > "$work/gpu1.txt" & wait
cat "$work/gpu0.txt" "$work/gpu1.txt"
