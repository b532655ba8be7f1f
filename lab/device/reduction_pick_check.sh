#!/usr/bin/env bash
# lab/reduction_pick_probe.py on one GPU: fresh processes (empty caches), alternating the ladder's compiled rungs as
# the suite compiles them (inductor times each reduction's configs) and with one config per reduction held, ROUNDS
# pairs (default 3), none started after BUDGET seconds (default 190).
#   bash lab/device/reduction_pick_check.sh OUT      OUT/probe.tgz: each process's JSON and log
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:-}"
t0=$(date +%s)
for round in $(seq "${ROUNDS:-3}"); do
  for mode in tuned hold; do
    (( $(date +%s) - t0 < ${BUDGET:-190} )) || break 2
    env $(fresh) CUDA_VISIBLE_DEVICES=0 timeout 75 python3 -m lab.reduction_pick_probe "$work/$mode-$round.json" \
      $([[ $mode == hold ]] && echo --hold) > "$work/$mode-$round.log" 2>&1
    echo "== $mode $round: exit $?, $(( $(date +%s) - t0 )) s; $(tail -1 "$work/$mode-$round.log" | cut -c1-200)" | tee -a "$work/summary.txt"
  done
done
tar czf /tmp/reduction-probe.tgz -C "$work" . && mv /tmp/reduction-probe.tgz "$work/probe.tgz"
