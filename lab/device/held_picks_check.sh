#!/usr/bin/env bash
# max-autotune's held picks (perftests/support/autotune_picks.py) on a host with two GPUs, and [dynamic] held (issue 46).
#   GPU 0: test_compile_mode[max-autotune] blessed with --speedgate-calibrate 2 into a copy of the committed files,
#          then `python -m speedgate study` of it (clean, +5%, +10%) against a copy made after that bless.
#   GPU 1: test_dynamic_shapes[dynamic] twice as the suite runs it and twice with -p lab.hold_pointwise, each in a
#          fresh process with empty caches, against the committed file; then the max-autotune case blessed with
#          --speedgate-calibrate 2 into the first copy, holding GPU 0's picks (a second card's evidence).
# Writes OUT/summary.txt, OUT/logs.tgz (logs, reports, the study) and OUT/baselines (the blessed copy).
# Usage: bash lab/device/held_picks_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
export PYTHONUNBUFFERED=1
bl=/tmp/held/baselines; study_bl=/tmp/held/study-baselines; mkdir -p $bl $study_bl "$work/logs"
cp baselines/*.json $bl/
sel=("perftests/test_compile_modes.py::test_compile_mode[max-autotune]")
t0=$(date +%s)
stamp() { echo "== $1: exit $2, at $(( $(date +%s) - t0 )) s; $(tail -1 "$3" | cut -c1-200)" >> "$work/summary.txt"; }
( # GPU 0
  f=$work/logs/bless-gpu0; env $(fresh) CUDA_VISIBLE_DEVICES=0 timeout 300 python3 -m pytest "${sel[@]}" -p no:cacheprovider -q -rs \
    --baseline-dir $bl --update-baselines --speedgate-calibrate 2 --speedgate-json $f.json > $f.log 2>&1; stamp bless-gpu0 $? $f.log
  cp $bl/*.json $study_bl/; touch /tmp/held/gpu0-blessed
  f=$work/logs/study; CUDA_VISIBLE_DEVICES=0 timeout 420 python3 -m speedgate study "$work/logs/study" --runs 1 --slowdowns 0.05,0.10 -- \
    "${sel[@]}" -rs --baseline-dir $study_bl > $f.log 2>&1; stamp study $? $f.log
) &
( # GPU 1
  for run in 1 2; do
    for hold in plain held; do
      f=$work/logs/dynamic-$hold-$run; extra=(); [[ $hold == held ]] && extra=(-p lab.hold_pointwise)
      env $(fresh) CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest "perftests/test_compile_dynamic.py::test_dynamic_shapes[dynamic]" \
        "${extra[@]}" -p no:cacheprovider -q -rs --speedgate-json $f.json > $f.log 2>&1; stamp dynamic-$hold-$run $? $f.log
    done
  done
  while [[ ! -f /tmp/held/gpu0-blessed ]]; do sleep 2; done
  f=$work/logs/bless-gpu1; env $(fresh) CUDA_VISIBLE_DEVICES=1 timeout 300 python3 -m pytest "${sel[@]}" -p no:cacheprovider -q -rs \
    --baseline-dir $bl --update-baselines --speedgate-calibrate 2 --speedgate-json $f.json > $f.log 2>&1; stamp bless-gpu1 $? $f.log
) &
wait
for file in $bl/*.json; do cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }; done
tar czf "$out/logs.tgz" -C "$work" logs && rm -rf "$work/logs"
cat "$work/summary.txt"
