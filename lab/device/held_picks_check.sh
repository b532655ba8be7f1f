#!/usr/bin/env bash
# max-autotune's held picks (perftests/support/autotune_picks.py) on a host with two GPUs, and [dynamic] held (issue 46).
#   GPU 0: test_compile_mode[max-autotune] blessed with --speedgate-calibrate 2 into a copy of the committed files,
#          then `python -m speedgate study` of it (clean, then each of SLOWDOWNS, default 0.05) against a copy made
#          after that bless; GATE=plain: one gate run in a fresh process instead.
#   GPU 1: (DYNAMIC=0 leaves this out) test_dynamic_shapes[dynamic] twice as the suite runs it and twice with
#          -p lab.hold_pointwise, each in a fresh process with empty caches, against the committed file; then the
#          max-autotune case blessed with
#          --speedgate-calibrate 2 into the first copy, holding GPU 0's picks (a second card's evidence).
# Logs live in /tmp/held (a call's OUT is emptied by the next call); after every step they are packed into
# OUT/logs.tgz, so a call cut off at its limit still brings back what finished. OUT/baselines: the blessed copy.
# Usage: bash lab/device/held_picks_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
out=${1:?OUT}; work=/tmp/held; mkdir -p "$out" $work/logs; install_deps; list_cards | tee -a $work/summary.txt
export PYTHONUNBUFFERED=1
bl=$work/baselines; study_bl=$work/study-baselines; mkdir -p $bl $study_bl
cp baselines/*.json $bl/
sel=("perftests/test_compile_modes.py::test_compile_mode[max-autotune]")
t0=$(date +%s)
pack() {
  echo "== $1: exit $2, at $(( $(date +%s) - t0 )) s; $(tail -1 "$3" | cut -c1-200)" >> $work/summary.txt
  for file in $bl/*.json; do cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }; done
  tar czf "$out/logs.tgz.part" -C $work summary.txt logs && mv "$out/logs.tgz.part" "$out/logs.tgz"
}
( # GPU 0
  f=$work/logs/bless-gpu0; env $(fresh) CUDA_VISIBLE_DEVICES=0 timeout 260 python3 -m pytest "${sel[@]}" -p no:cacheprovider -q -rs \
    --baseline-dir $bl --update-baselines --speedgate-calibrate 2 --speedgate-json $f.json > $f.log 2>&1; pack bless-gpu0 $? $f.log
  cp $bl/*.json $study_bl/; touch $work/gpu0-blessed
  if [[ ${GATE:-study} == study ]]; then
    f=$work/logs/study; CUDA_VISIBLE_DEVICES=0 timeout 330 python3 -m speedgate study $work/logs/study --runs 1 --slowdowns "${SLOWDOWNS:-0.05}" -- \
      "${sel[@]}" -rs --baseline-dir $study_bl > $f.log 2>&1; pack study $? $f.log
  else  # GATE=plain: one gate run in a fresh process
    f=$work/logs/gate-gpu0; env $(fresh) CUDA_VISIBLE_DEVICES=0 timeout 260 python3 -m pytest "${sel[@]}" -p no:cacheprovider -q -rs \
      --baseline-dir $study_bl --speedgate-json $f.json > $f.log 2>&1; pack gate-gpu0 $? $f.log
  fi
) &
( # GPU 1
  for run in $(seq 1 $(( ${DYNAMIC:-1} ? 2 : 0 ))); do
    for hold in plain held; do
      f=$work/logs/dynamic-$hold-$run; extra=(); [[ $hold == held ]] && extra=(-p lab.hold_pointwise)
      env $(fresh) CUDA_VISIBLE_DEVICES=1 timeout 120 python3 -m pytest "perftests/test_compile_dynamic.py::test_dynamic_shapes[dynamic]" \
        "${extra[@]}" -p no:cacheprovider -q -rs --speedgate-json $f.json > $f.log 2>&1; pack dynamic-$hold-$run $? $f.log
    done
  done
  while [[ ! -f $work/gpu0-blessed ]]; do sleep 2; done
  f=$work/logs/bless-gpu1; env $(fresh) CUDA_VISIBLE_DEVICES=1 timeout 260 python3 -m pytest "${sel[@]}" -p no:cacheprovider -q -rs \
    --baseline-dir $bl --update-baselines --speedgate-calibrate 2 --speedgate-json $f.json > $f.log 2>&1; pack bless-gpu1 $? $f.log
) &
wait
cat $work/summary.txt
