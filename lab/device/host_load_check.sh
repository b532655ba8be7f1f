#!/usr/bin/env bash
# Does other work on the host move a launch-bound pass (issue 46: regional compilation's two host states,
# docs/results/gate-study.md section 5)? lab.drift_probe regional, 200 rounds each, one after another:
#   alone on GPU 0; on GPU 0 with 8, then 24 spinning host processes from round 99; then on both GPUs at once (what
#   -n 2 does). Each round records the launching core's clock (where cpufreq shows it) and the load average.
#   bash lab/device/host_load_check.sh OUT      OUT/host_load/: the probes' logs and rounds, summary.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
work=$out/host_load
mkdir -p "$work"
source lab/device/lib.sh
export PYTHONUNBUFFERED=1
install_deps
list_cards | tee "$work/summary.txt"
nproc | sed 's/^/host cores: /' >> "$work/summary.txt"
probe() {  # LABEL GPU ARGS...
  local label=$1 gpu=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 15 200 python3 -m lab.drift_probe "$work/$label" --case regional --rounds 200 "$@" \
    > "$work/$label.log" 2>&1
  { echo "== $label on GPU $gpu ($*): exit $?"; grep -E "^rounds|started|card" "$work/$label.log" | cut -c1-220; } >> "$work/summary.txt"
}
probe alone 0
probe busy8 0 --busy-at 99 --busy 8
probe busy24 0 --busy-at 99 --busy 24
probe pair0 0 & probe pair1 1 & wait
cat "$work/summary.txt"
