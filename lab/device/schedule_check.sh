#!/usr/bin/env bash
# Does the schedule change how long a run takes under `-n 2` (issue 46, docs/results/suite-time.md)? A gate run under
# `-n 2` on a host with two GPUs, empty caches, against the committed files, with one schedule per call:
#   CHUNK=1 bash lab/device/schedule_check.sh OUT          the cases marked `compile`, one test sent at a time
#   CHUNK=100000 bash lab/device/schedule_check.sh OUT     the same, xdist's default (a chunk as long as the collection)
#   SCHEDULE=xdist bash lab/device/schedule_check.sh OUT   the whole suite in xdist's own order
#   SCHEDULE=longest-first bash ...                        the whole suite, speedgate's longest work first
# SELECT (pytest's selection, word-split) overrides the selection. Chain the calls on one warm machine, so that every
# schedule runs on the same cards. The first call on a machine compiles a small function on each GPU first, so that no
# schedule pays the machine's first import and compile. OUT: LABEL.log (pytest's output), LABEL.json (the
# --speedgate-json report: each test's seconds) and summary.txt (pytest's own time), LABEL being chunkCHUNK or
# SCHEDULE-N (N: the runs of that schedule on the machine so far).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
if [[ -n ${CHUNK:-} ]]; then
  how=(--maxschedchunk "$CHUNK"); label=chunk$CHUNK; default_select="perftests -m compile"
else
  how=(--speedgate-schedule "${SCHEDULE:?CHUNK or SCHEDULE}"); default_select=perftests
  n=$(cat "/tmp/schedule_check.$SCHEDULE" 2>/dev/null || echo 0); echo $((n + 1)) > "/tmp/schedule_check.$SCHEDULE"
  label=$SCHEDULE-$((n + 1))
fi
read -ra select <<< "${SELECT:-$default_select}"
if [[ ! -f /tmp/schedule_check.warm ]]; then
  for gpu in 0 1; do
    CUDA_VISIBLE_DEVICES=$gpu python3 -c "import torch; torch.compile(lambda x: x.relu() + 1)(torch.ones(8, device='cuda'))" &
  done
  wait
  touch /tmp/schedule_check.warm
fi
t0=$(date +%s)
env $(fresh) CUDA_VISIBLE_DEVICES=0,1 timeout -s INT -k 15 540 python3 -m pytest "${select[@]}" -n 2 \
  "${how[@]}" -p no:cacheprovider -q -rs --speedgate-json "$work/$label.json" > "$work/$label.log" 2>&1
echo "== $label (${how[*]}): exit $?, $(($(date +%s) - t0)) s; $(grep -m1 'sent the longest work first' "$work/$label.log" | cut -c1-160); $(tail -1 "$work/$label.log")" \
  | tee -a "$work/summary.txt"
