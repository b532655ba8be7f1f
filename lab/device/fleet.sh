#!/usr/bin/env bash
# On a host with one GPU or several (the device tool's nvidia-h100-x2, nvidia-h100-x4, ...): each GPU runs its own queue
# of jobs, one pytest process at a time, the queues side by side; every job stops (SIGINT, so pytest writes its
# report and blesses what finished) before the call's deadline. Baseline files, compile caches and logs live in
# .gpu-state/ (git-ignored), which stays on a warm machine between chained calls: a first call blesses, the next
# gates on the other card against what the first one wrote, with the caches it filled.
#
#   bash lab/device/fleet.sh OUT "GPU0 JOBS" ["GPU1 JOBS"]     e.g.  "probe gate_compile" "bless_triton gate_compile"
# Jobs: bless_triton / gate_triton (`-k "triton or cutlass"`: the Triton files, CUTLASS, the compiler suite's
# Triton custom op), bless_compile / gate_compile (the rest of the single-GPU suite), bless_dynamic
# (test_compile_dynamic.py alone), bless_max_autotune (test_compile_mode[max-autotune] blessed, not calibrated, into a
# folder of its own, .gpu-state/bless-max-autotune: its entries are merged by hand, the gates after it read the
# committed files), probe
# (lab/compiled_reference_spread.py, 2 processes per mode; its reports stay in .gpu-state/probe, so a
# probe cut off at the deadline goes on in the next call), study (tools/gate_study.py against the committed files:
# 3 clean runs, 2 per injected slowdown; resumes the same way from .gpu-state/study), gate_suite (the whole
# single-GPU suite gated in one pytest process, which may take longer than one call: it starts in a session of its
# own (setsid), so it runs on after the call returns, until the machine goes back; each call that names it waits for
# it until the deadline, and the first to find it finished reports it; its log and report stay in
# .gpu-state/suite-gpuN), gate_suite_warm (the same, after gate_suite has finished on that GPU, with the compile
# caches it filled, as a CI runner that keeps them starts: its log, every test's duration in it, and report in
# .gpu-state/suite-warm-gpuN), gate_suite_n2 and gate_suite_n2_warm (the same two, with `-n 2` over GPUs 0 and 1, one
# worker each: named in GPU 0's queue alone; in .gpu-state/suite-n2 and suite-n2-warm). bless_* calibrate (--speedgate-calibrate 2).
# DEADLINE (seconds from the start, default 560) bounds every job. Writes OUT/fleet.tgz (logs, reports, summary; and
# OUT/fleet-gpuN.tgz after each of GPU N's jobs) and OUT/baselines/*.json (the state's files a bless changed).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
shift
start=$(date +%s)
deadline=$((start + ${DEADLINE:-560}))
state=.gpu-state
mkdir -p "$state/baselines" "$state/cache" "$state/logs"
[[ -n $(ls "$state/baselines") ]] || cp baselines/*.json "$state/baselines/"
call=$(($(ls "$state/logs" | grep -c '^call-') + 1))
work="$state/logs/call-$call"
mkdir -p "$work"
source lab/device/lib.sh
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR="$PWD/$state/cache/triton" TORCHINDUCTOR_CACHE_DIR="$PWD/$state/cache/inductor"
install_deps
list_cards | tee -a "$work/summary.txt"
echo "call $call, $(date -u +%FT%TZ), torch $(python3 -c 'import torch; print(torch.__version__)'), triton $(python3 -c 'import triton; print(triton.__version__)')" | tee -a "$work/summary.txt"

pack() {  # pack ARCHIVE: the logs and reports of every call so far, and the probe's reports
  tar czf "$1" -C "$state" logs $([[ -d $state/probe ]] && echo probe) $([[ -d $state/study ]] && echo study) \
    $([[ -d $state/bless-max-autotune ]] && echo bless-max-autotune) \
    $(cd "$state" && ls -d suite-* 2>/dev/null)
}

summarize() {  # summarize LOG: a job's verdict lines, for summary.txt
  grep -E "^(FAILED|ERROR)|passed|failed|no entry|regressed|improved|first calls|where the time|^\|" "$1" | tail -30 | cut -c1-260
}

suite() {  # suite GPU NAME: the gate_suite* jobs (see above)
  local gpu=$1 name=$2 visible=$1 cold="$state/suite-gpu$1" durations=40 dir
  local extra=()
  if [[ $name == gate_suite_n2* ]]; then visible=0,1 cold="$state/suite-n2" extra=(-n 2); fi
  dir=$cold
  if [[ $name == *_warm ]]; then
    dir="$cold-warm" durations=0
    [[ $name == gate_suite_warm ]] && dir="$state/suite-warm-gpu$gpu"
    while [[ ! -f $cold/rc ]] && (($(date +%s) < deadline)); do sleep 5; done  # after the cold run
    if [[ ! -f $cold/rc ]]; then
      echo "== gpu$gpu $name: not started, the cold run was still going at the deadline" >> "$work/summary.txt"
      return
    fi
  fi
  mkdir -p "$dir"
  if [[ ! -f $dir/pid ]]; then
    # shellcheck disable=SC2016  # expanded by the inner shell
    CUDA_VISIBLE_DEVICES=$visible setsid bash -c 't0=$(date +%s); timeout -s INT -k 15 1700 python3 -m pytest "${@:2}" > "$1/log" 2>&1
      echo $? > "$1/rc.tmp"; echo $(($(date +%s) - t0)) > "$1/seconds"; mv "$1/rc.tmp" "$1/rc"' \
      _ "$dir" perftests "${extra[@]}" -p no:cacheprovider -q -rs --durations=$durations --baseline-dir "$state/baselines" \
      --speedgate-json "$dir/report.json" < /dev/null > /dev/null 2>&1 &
    echo $! > "$dir/pid"
    echo "== gpu$gpu $name: started in call $call at $(date -u +%T)" >> "$work/summary.txt"
  fi
  while [[ ! -f $dir/rc ]] && (($(date +%s) < deadline)); do sleep 5; done
  if [[ ! -f $dir/rc ]]; then
    echo "== gpu$gpu $name: still running at the deadline (pid $(cat "$dir/pid"))" >> "$work/summary.txt"
  elif [[ ! -f $dir/reported ]]; then
    { echo "== gpu$gpu $name: exit $(cat "$dir/rc"), $(cat "$dir/seconds") s in one pytest run"; summarize "$dir/log"; } >> "$work/summary.txt"
    touch "$dir/reported"
  fi
  pack "$out/fleet-gpu$gpu.tgz"
}

job() {  # job GPU NAME: one pytest process (or the probe) on GPU, stopped by SIGINT at the deadline
  local gpu=$1 name=$2 left t0 rc
  if [[ $name == gate_suite* ]]; then suite "$gpu" "$name"; return; fi
  left=$((deadline - $(date +%s)))
  if ((left < 20)); then echo "== gpu$gpu $name: not started, ${left} s left" >> "$work/summary.txt"; return; fi
  local log="$work/gpu$gpu-$name.log" report="$work/gpu$gpu-$name.json"
  local dir="$state/baselines"
  [[ $name == bless_max_autotune ]] && dir="$state/bless-max-autotune"  # a file of its own: the gate keeps the committed
  local common=(-p no:cacheprovider -q -rs --durations=25 --baseline-dir "$dir" --speedgate-json "$report")
  t0=$(date +%s)
  case $name in
    bless_triton) set -- perftests -k "triton or cutlass" --update-baselines --speedgate-calibrate 2 ;;
    gate_triton) set -- perftests -k "triton or cutlass" ;;
    bless_compile) set -- perftests -k "not triton and not cutlass" --update-baselines --speedgate-calibrate 2 ;;
    gate_compile) set -- perftests -k "not triton and not cutlass" ;;
    bless_dynamic) set -- perftests/test_compile_dynamic.py --update-baselines --speedgate-calibrate 2 ;;
    bless_max_autotune) mkdir -p "$state/bless-max-autotune"
      set -- perftests/test_compile_modes.py -k "test_compile_mode and max-autotune" --update-baselines ;;
    probe) set -- probe ;;
    study) set -- study ;;
    *) echo "unknown job $name"; return ;;
  esac
  if [[ $1 == study ]]; then
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 15 "$left" python3 tools/gate_study.py "$state/study" --against baselines \
      --runs 3 --repeat 2 --warm-caches > "$log" 2>&1
  elif [[ $1 == probe ]]; then
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 15 "$left" python3 -m lab.compiled_reference_spread "$state/probe" \
      --processes 2 -- perftests/test_triton_rowwise.py perftests/test_triton_matmul.py \
      -k "(rowwise and bfloat16) or (fp8_matmul and tiled-4096)" > "$log" 2>&1
  else
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 15 "$left" python3 -m pytest "$@" "${common[@]}" > "$log" 2>&1
  fi
  rc=$?
  {
    echo "== gpu$gpu $name: exit $rc, $(($(date +%s) - t0)) s"
    summarize "$log"
  } >> "$work/summary.txt"
  pack "$out/fleet-gpu$gpu.tgz"  # per queue: a call cut off at its limit still brings these
}

queue() {  # queue GPU JOB...
  local gpu=$1; shift
  for name in "$@"; do job "$gpu" "$name"; done
}

pids=()
gpu=0
for jobs in "$@"; do
  # shellcheck disable=SC2086  # a queue is a list of job names
  queue "$gpu" $jobs &
  pids+=($!)
  gpu=$((gpu + 1))
done
wait "${pids[@]}"
for file in "$state/baselines/"*.json; do  # the files a bless changed (a call brings back at most 8 files)
  cmp -s "$file" "baselines/$(basename "$file")" || { mkdir -p "$out/baselines" && cp "$file" "$out/baselines/"; }
done
pack "$out/fleet.tgz"
echo "== call $call took $(($(date +%s) - start)) s"
cat "$work/summary.txt"
