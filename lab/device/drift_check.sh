#!/usr/bin/env bash
# One call on a host with two GPUs, for issue 46's drifting latency cases and issue 49's start-up under -n 2:
#   both:  first, the one-shot all-reduce's cases blessed into the 2x file (as oneshot_check.sh);
#   GPU 0: lab.drift_probe training, then test_training_step blessed with --speedgate-calibrate 2 (two runs in one
#          process: the in-process spread), at this tree and, where .old/ holds an older tree (git archive REV |
#          tar -x -C .old; carried), at that tree with its own plugin;
#   GPU 1: the same for regional compilation (lab.drift_probe regional, test_regional_vs_whole_model);
#   both:  last, the small Triton files cold, serially and under -n 2, with --durations.
#   bash lab/device/drift_check.sh OUT      OUT/drift.tgz: logs and reports; OUT/baselines: files that changed
# DEADLINE (s, default 585): when the call packs what there is. ONESHOT=0, SMALL=0: without those steps; CAL_RUNS:
# calibrating runs (default 2); PROBE_ARGS: more arguments for lab.drift_probe (--profile-at N).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
start=$(date +%s)
deadline=$((start + ${DEADLINE:-585}))
work=$out/drift
mkdir -p "$work" .gpu-state/baselines
cp baselines/*.json .gpu-state/baselines/
source lab/device/lib.sh
export PYTHONUNBUFFERED=1
install_deps
list_cards | tee "$work/summary.txt"
step_archive=$out/drift.tgz

# calibrated LABEL GPU TREE TEST: the test blessed with two calibrating runs into a scratch copy of the files, with
# fresh compile caches, from TREE's root with TREE's plugin first on the path.
calibrated() {
  local label=$1 gpu=$2 tree=$3 test=$4 files
  files=$(mktemp -d) && cp "$tree"/baselines/*.json "$files/"
  ( cd "$tree" && CUDA_VISIBLE_DEVICES=$gpu TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) \
      PYTHONPATH=$PWD/plugin:$PWD:${PYTHONPATH:-} timeout -s INT -k 15 "$(left)" python3 -m pytest "$test" \
      -p no:cacheprovider -q -rs --baseline-dir "$files" --update-baselines --speedgate-calibrate "${CAL_RUNS:-2}" \
      --speedgate-json "$work/$label.json" ) > "$work/$label.log" 2>&1
  echo "== $label: exit $?; $(tail -1 "$work/$label.log"); plugin $(cd "$tree" && PYTHONPATH=$PWD/plugin:${PYTHONPATH:-} \
    python3 -c 'import speedgate; print(speedgate.__file__)')" >> "$work/summary.txt"
}
lane() {  # GPU CASE TEST
  local gpu=$1 case=$2 test=$3
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 15 150 python3 -m lab.drift_probe "$work" --case "$case" --rounds 200 ${PROBE_ARGS:-} \
    > "$work/probe-$case.log" 2>&1
  echo "== probe $case: exit $?" >> "$work/summary.txt"
  calibrated "$case-now" "$gpu" . "$test"
  [[ -d .old/plugin ]] && calibrated "$case-old" "$gpu" .old "$test"
}
[[ ${ONESHOT:-1} == 1 ]] && step oneshot 150 python3 -m pytest perftests/test_nccl.py -k oneshot -p no:cacheprovider -q -rs \
    --baseline-dir .gpu-state/baselines --update-baselines --speedgate-json "$work/oneshot.json"
lane 0 training perftests/test_compile_training.py &
lane 1 regional perftests/test_compile_regional.py &
wait
cat "$work"/probe-*.log >> "$work/summary.txt"
tar czf "$step_archive" -C "$work" .

small=(perftests/test_triton_elementwise.py perftests/test_triton_rowwise.py perftests/test_triton_l2.py)
for mode in $([[ ${SMALL:-1} == 1 ]] && echo serial n2); do
  (( $(left) > 45 )) || break
  extra=(); [[ $mode == n2 ]] && extra=(-n 2)
  files=$(mktemp -d) && cp baselines/*.json "$files/"
  t0=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=0,1 TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout -s INT -k 10 \
    $(( $(left) - 10 )) python3 -m pytest "${small[@]}" "${extra[@]}" -p no:cacheprovider -q --durations=0 \
    --baseline-dir "$files" --speedgate-json "$work/small-$mode.json" > "$work/small-$mode.log" 2>&1
  echo "== small $mode: exit $?, $(python3 -c "import time,sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0") s; $(tail -1 "$work/small-$mode.log")" >> "$work/summary.txt"
done
for file in .gpu-state/baselines/*.json; do
  cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }
done
tar czf "$step_archive" -C "$work" .
cat "$work/summary.txt"
