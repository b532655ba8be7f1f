#!/usr/bin/env bash
# Does other work on the host move a launch-bound pass (issue 46: regional compilation's two host states,
# docs/results/gate-study.md section 5)? lab.drift_probe regional, 200 rounds each, one after another:
#   alone on GPU 0; on GPU 0 with 8, then 24 spinning host processes from round 99; then on both GPUs at once (what
#   -n 2 does). Each round records the launching core's clock (where cpufreq shows it) and the load average.
#   bash lab/device/host_load_check.sh OUT      OUT/host_load/: the probes' logs and rounds, summary.txt
# ROUNDS (default 200) per probe; PROBES (default "alone busy8 busy24 pair"): which to run; the busy ones start their
# spinning processes after the middle round.
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
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 15 200 python3 -m lab.drift_probe "$work/$label" --case regional --rounds "$rounds" "$@" \
    > "$work/$label.log" 2>&1
  { echo "== $label on GPU $gpu ($*): exit $?"; grep -E "^rounds|started|card" "$work/$label.log" | cut -c1-220; } >> "$work/summary.txt"
}
rounds=${ROUNDS:-200}
probes=" ${PROBES:-alone busy8 busy24 pair} "
[[ $probes == *" alone "* ]] && probe alone 0
[[ $probes == *" busy8 "* ]] && probe busy8 0 --busy-at $((rounds / 2 - 1)) --busy 8
[[ $probes == *" busy24 "* ]] && probe busy24 0 --busy-at $((rounds / 2 - 1)) --busy 24
if [[ $probes == *" pair "* ]]; then probe pair0 0 & probe pair1 1 & wait; fi
cat "$work/summary.txt"
