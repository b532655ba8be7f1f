#!/usr/bin/env bash
# Issue 46's launch-bound and not-yet-re-blessed cases on a host with two GPUs, then issue 49's two-GPU cases:
#   1. probe:  lab.drift_probe regional --profile-at 99 on both GPUs at once: GPU 0 as the plugin now runs it (it
#              asks Kineto for TEARDOWN_CUPTI=1 before its first trace), GPU 1 with TEARDOWN_CUPTI=0 (as before);
#              then GPU 0 again with TEARDOWN_CUPTI=1 in the environment from the start.
#   2. bless:  the REBLESS selection on both GPUs at once, --speedgate-calibrate 2, into one copy of the files.
#   3. pair:   the two-GPU cases (perftests/test_nccl.py), blessed with --speedgate-calibrate 2 into the 2x file.
#   4. study:  `python -m speedgate study` over the REBLESS selection under -n 2: clean, +5%, +10%.
# Steps 2 and 4 run in the background (setsid) and outlive a call: chain calls of this script on the warm machine
# until summary.txt says "study: done". State in .gpu-state/ (git-ignored).
#   bash lab/device/rebless_study.sh OUT   OUT/rebless.tgz: logs, probe output, the study's folder; OUT/baselines
# DEADLINE (s, default 570): when this call stops waiting and packs what there is. STEPS: which of probe, bless,
# pair, study to run (default all four); a step left out is not waited for. The first call's STEPS holds for every
# chained call (lib.sh's keep_settings).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
start=$(date +%s)
deadline=$((start + ${DEADLINE:-570}))
source lab/device/lib.sh
resume_state
keep_settings STEPS
steps=" ${STEPS:-probe bless pair study} "
done_with() { [[ -f $state/$1.done ]]; }
wait_for() {  # FILE: wait until it exists or the call's time is up; 0 when it exists
  while [[ ! -f $1 ]] && (( $(left) > 20 )); do sleep 5; done
  [[ -f $1 ]]
}

if [[ $steps == *" probe "* ]] && ! done_with probe; then
  probe() {  # LABEL GPU ENV...
    local label=$1 gpu=$2; shift 2
    env CUDA_VISIBLE_DEVICES="$gpu" "$@" timeout -k 15 200 python3 -m lab.drift_probe "$work/probe-$label" --case regional \
      --rounds 200 --profile-at 99 > "$work/probe-$label.log" 2>&1
    echo "== probe $label on GPU $gpu: exit $?" >> "$work/summary.txt"
  }
  { probe plugin 0; probe env1 0 TEARDOWN_CUPTI=1; } &
  probe env0 1 TEARDOWN_CUPTI=0 &
  wait
  for label in plugin env1 env0; do echo "-- $label"; grep -E "^rounds|profiled|card" "$work/probe-$label.log"; done \
    | cut -c1-160 >> "$work/summary.txt"
  touch "$state/probe.done"
fi

if [[ $steps == *" bless "* ]] && ! done_with bless && [[ ! -f $state/bless.started ]]; then
  touch "$state/bless.started"
  for gpu in 0 1; do
    CUDA_VISIBLE_DEVICES=$gpu setsid bash -c 't0=$(date +%s); env $1 python3 -m pytest "${@:3}" -p no:cacheprovider -q -rs \
        --baseline-dir "$2/baselines" --update-baselines --speedgate-calibrate 2 --speedgate-json "$2/logs/bless-gpu$CUDA_VISIBLE_DEVICES.json" \
        > "$2/logs/bless-gpu$CUDA_VISIBLE_DEVICES.log" 2>&1; echo "== bless on GPU $CUDA_VISIBLE_DEVICES: exit $?, $(($(date +%s) - t0)) s; $(tail -1 "$2/logs/bless-gpu$CUDA_VISIBLE_DEVICES.log")" \
        >> "$2/logs/summary.txt"; touch "$2/bless-gpu$CUDA_VISIBLE_DEVICES.rc"' _ "$(fresh)" "$state" "${rebless[@]}" \
      < /dev/null > /dev/null 2>&1 &
  done
fi
if [[ -f $state/bless.started ]] && ! done_with bless; then
  wait_for "$state/bless-gpu0.rc" && wait_for "$state/bless-gpu1.rc" && touch "$state/bless.done"
fi

if [[ $steps == *" pair "* ]] && { done_with bless || [[ $steps != *" bless "* ]]; } && ! done_with pair && (( $(left) > 200 )); then
  bless_pair
fi

if [[ $steps == *" study "* ]] && done_with bless && { done_with pair || [[ $steps != *" pair "* ]]; } \
    && [[ ! -f $state/study.pid ]]; then
  CUDA_VISIBLE_DEVICES=0,1 setsid bash -c 'python3 -m speedgate study "$1/study" --runs 1 --slowdowns 0.05,0.10 -- \
      "${@:2}" -n 2 -rs --baseline-dir "$1/baselines" > "$1/logs/study.log" 2>&1; echo $? > "$1/study.rc"' \
    _ "$state" "${rebless[@]}" < /dev/null > /dev/null 2>&1 &
  echo $! > "$state/study.pid"
  echo "== study: started at $(date -u +%T)" >> "$work/summary.txt"
fi
if [[ -f $state/study.pid ]]; then
  if wait_for "$state/study.rc"; then
    grep -q "study: done" "$work/summary.txt" || { echo "== study: done, exit $(cat "$state/study.rc")" >> "$work/summary.txt"
      tail -4 "$work/study.log" >> "$work/summary.txt"; }
  else
    echo "== study: still running at $(date -u +%T): $(ls "$state/study" 2>/dev/null | tr '\n' ' ')" >> "$work/summary.txt"
  fi
fi
close_state rebless.tgz
