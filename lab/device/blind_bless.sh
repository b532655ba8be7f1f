#!/usr/bin/env bash
# The blind cases re-blessed and checked on a host with two GPUs (issue 46), in two chained calls on a warm machine;
# state in .gpu-state/ (git-ignored), as lab/device/fleet.sh keeps it.
#   bash lab/device/blind_bless.sh OUT bless   both GPUs at once, each a process of its own with empty compile caches:
#                                              the heavy compute-bound cases (now counted in SM cycles) and the
#                                              training step blessed with --speedgate-calibrate 2 into one file
#                                              (two cards' evidence); then lab/oneshot_sweep.py on both GPUs
#   bash lab/device/blind_bless.sh OUT gate    GPU 0 gates the Triton half, GPU 1 the compiler cases that declare
#                                              flops, against the file the bless wrote (reports: codegen facts,
#                                              evidence, false alarms); then the one-shot all-reduce's cases blessed
#                                              into the 2x file
# OUT/baselines/*.json: the files that changed; OUT/blind.tgz: logs and reports. DEADLINE (s, default 560).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
what=${2:?bless or gate}
start=$(date +%s)
deadline=$((start + ${DEADLINE:-560}))
state=.gpu-state
mkdir -p "$state/baselines" "$state/reports"
[[ -n $(ls "$state/baselines") ]] || cp baselines/*.json "$state/baselines/"
work=$state/logs-$what
mkdir -p "$work"
source lab/device/lib.sh
export PYTHONUNBUFFERED=1
install_deps
list_cards | tee -a "$work/summary.txt"
common=(-p no:cacheprovider -q -rs --baseline-dir "$state/baselines")
pytest_on() {  # pytest_on GPU LABEL ARGS...: one pytest process on GPU with empty caches of its own
  local gpu=$1 label=$2; shift 2
  local t0; t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpu TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) \
    timeout -s INT -k 15 "$(left)" python3 -m pytest "$@" "${common[@]}" --speedgate-json "$state/reports/$label.json" \
    > "$work/$label.log" 2>&1
  { echo "== $label on GPU $gpu: exit $?, $(($(date +%s) - t0)) s"; grep -E "passed|failed|regressed|improved|inconclusive|pick-changed|no entry|^(FAILED|ERROR)" "$work/$label.log" | tail -12 | cut -c1-240; } >> "$work/summary.txt"
}
if [[ $what == bless ]]; then
  pytest_on 0 bless-gpu0 "${heavy[@]}" --update-baselines --speedgate-calibrate 2 &
  pytest_on 1 bless-gpu1 "${heavy[@]}" --update-baselines --speedgate-calibrate 2 &
  wait
  if (( $(left) > 60 )); then
    timeout -k 10 "$(( $(left) - 15 ))" python3 -m lab.oneshot_sweep "$state/sweep" --calls 30 > "$work/sweep.log" 2>&1
    { echo "== oneshot sweep: exit $?"; cat "$work/sweep.log" | tail -45 | cut -c1-200; } >> "$work/summary.txt"
  fi
else
  pytest_on 0 gate-triton perftests -k "triton or cutlass" &
  pytest_on 1 gate-compile perftests/test_compile_modes.py perftests/test_compile_ladder.py perftests/test_compile_flex.py perftests/test_compile_training.py &
  wait
  if (( $(left) > 60 )); then
    TRITON_CACHE_DIR=$(mktemp -d) timeout -s INT -k 15 "$(left)" python3 -m pytest perftests/test_nccl.py -k oneshot "${common[@]}" \
      --update-baselines --speedgate-json "$state/reports/nccl-oneshot.json" > "$work/nccl.log" 2>&1
    { echo "== nccl oneshot: exit $?"; tail -25 "$work/nccl.log" | cut -c1-240; } >> "$work/summary.txt"
  fi
fi
for file in "$state/baselines/"*.json; do
  cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }
done
tar czf "$out/blind.tgz" -C "$state" reports $(cd "$state" && ls -d logs-* sweep 2>/dev/null)
echo "== $what took $(($(date +%s) - start)) s"
cat "$work/summary.txt"
