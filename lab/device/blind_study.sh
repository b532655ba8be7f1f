#!/usr/bin/env bash
# The formerly blind cases on a host with two GPUs (issue 46), one call: on H200s first their bless (as
# blind_bless.sh bless); then GPU 0 gates them clean and GPU 1 with a 5% slowdown injected into every optimized side
# (tools/gate_study.py as a plugin), then GPU 0 at 10% and GPU 1 clean again; last, the one-shot all-reduce's sweep
# and cases (blessed into the 2x file).   bash lab/device/blind_study.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
start=$(date +%s)
deadline=$((start + ${DEADLINE:-560}))
state=.gpu-state
rm -rf "$state"; mkdir -p "$state/baselines" "$state/reports"
cp baselines/*.json "$state/baselines/"
work=$state/logs-study
mkdir -p "$work"
source lab/device/lib.sh
export PYTHONUNBUFFERED=1
install_deps
list_cards | tee -a "$work/summary.txt"
common=(-p no:cacheprovider -q -rs --baseline-dir "$state/baselines")
pytest_on() {  # pytest_on GPU LABEL SLOWDOWN ARGS...
  local gpu=$1 label=$2 slow=$3; shift 3
  local t0; t0=$(date +%s)
  local extra=(); [[ $slow != 0 ]] && extra=(-p tools.gate_study)
  SPEEDGATE_STUDY_SLOWDOWN=$slow CUDA_VISIBLE_DEVICES=$gpu TRITON_CACHE_DIR=$state/tc$gpu TORCHINDUCTOR_CACHE_DIR=$state/ic$gpu \
    timeout -s INT -k 15 "$(left)" python3 -m pytest "$@" "${extra[@]}" "${common[@]}" --speedgate-json "$state/reports/$label.json" \
    > "$work/$label.log" 2>&1
  { echo "== $label on GPU $gpu: exit $?, $(($(date +%s) - t0)) s"; grep -E " passed| failed|^(FAILED|ERROR)" "$work/$label.log" | tail -4 | cut -c1-200; } >> "$work/summary.txt"
}
if python3 -c "import torch,sys; sys.exit(0 if 'H200' in torch.cuda.get_device_name(0) else 1)"; then
  pytest_on 0 bless-gpu0 0 "${heavy[@]}" --update-baselines --speedgate-calibrate 2 &
  pytest_on 1 bless-gpu1 0 "${heavy[@]}" --update-baselines --speedgate-calibrate 2 &
  wait
fi
(( $(left) > 200 )) && { pytest_on 0 clean-gpu0 0 "${heavy[@]}" & pytest_on 1 slow5-gpu1 0.05 "${heavy[@]}" & wait; }
(( $(left) > 260 )) && { pytest_on 0 slow10-gpu0 0.10 "${heavy[@]}" & pytest_on 1 clean-gpu1 0 "${heavy[@]}" & wait; }
if (( $(left) > 90 )); then
  timeout -k 10 "$(( $(left) / 2 ))" python3 -m lab.oneshot_sweep "$state/sweep" --calls 30 > "$work/sweep.log" 2>&1
  { echo "== oneshot sweep: exit $?"; tail -40 "$work/sweep.log" | cut -c1-200; } >> "$work/summary.txt"
  TRITON_CACHE_DIR=$state/tc0 timeout -s INT -k 15 "$(left)" python3 -m pytest perftests/test_nccl.py -k oneshot "${common[@]}" \
    --update-baselines --speedgate-json "$state/reports/nccl-oneshot.json" > "$work/nccl.log" 2>&1
  { echo "== nccl oneshot: exit $?"; grep -E "oneshot|passed|failed|Error" "$work/nccl.log" | tail -14 | cut -c1-240; } >> "$work/summary.txt"
fi
for file in "$state/baselines/"*.json; do
  cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }
done
tar czf "$out/study.tgz" -C "$state" reports logs-study $(cd "$state" && ls -d sweep 2>/dev/null)
echo "== took $(($(date +%s) - start)) s"
cat "$work/summary.txt"
