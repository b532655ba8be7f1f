#!/usr/bin/env bash
# Issue 46: the tests whose entries in this GPU kind's file were blessed by another speedgate (lab/stale_entries.py)
# blessed again with --speedgate-calibrate 2, one process per GPU at once (each card's own evidence, into the same
# file), from empty compile caches. The blesses run in the background (setsid), so they outlive a call: chain calls
# of this script on the warm machine until summary.txt says "rebless: done". On nvidia-h100-x1 a second card's
# evidence needs a second machine: run it again after the first one went back (a fresh one starts bare; .gpu-state/
# goes with it, so bring back the file and commit it first).
#   bash lab/device/rebless_stale.sh OUT     state in .gpu-state/ (git-ignored); OUT/baselines: the file if it
#                                            changed; OUT/rebless.tgz: the logs
# DEADLINE (s, default 570): when this call stops waiting and packs what there is.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
deadline=$(( $(date +%s) + ${DEADLINE:-570} ))
source lab/device/lib.sh
resume_state
key=$(python3 -c "import pynvml; from speedgate.hardware import slugify; pynvml.nvmlInit(); \
name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)); \
print(slugify(name.decode() if isinstance(name, bytes) else name))")
gpus=$(python3 -c "import torch; print(min(torch.cuda.device_count(), 2))")
if [[ ! -f $state/rebless.started ]]; then
  mapfile -t tests < <(python3 -m lab.stale_entries "$state/baselines/$key.json")
  python3 -m lab.stale_entries "$state/baselines/$key.json" --count >> "$work/summary.txt"
  touch "$state/rebless.started"
  for gpu in $(seq 0 $((gpus - 1))); do
    env $(fresh) CUDA_VISIBLE_DEVICES=$gpu setsid bash -c 'python3 -m pytest "${@:3}" -p no:cacheprovider -q -rs \
        --baseline-dir "$1/baselines" --update-baselines --speedgate-calibrate 2 --speedgate-json "$1/logs/rebless-gpu$2.json" \
        > "$1/logs/rebless-gpu$2.log" 2>&1; echo $? > "$1/rebless-gpu$2.rc"' _ "$state" "$gpu" "${tests[@]}" \
      < /dev/null > /dev/null 2>&1 &
  done
  echo "== rebless: ${#tests[@]} tests on $gpus GPU(s), started at $(date -u +%T)" >> "$work/summary.txt"
fi
done_all() { for gpu in $(seq 0 $((gpus - 1))); do [[ -f $state/rebless-gpu$gpu.rc ]] || return 1; done; }
while ! done_all && (( $(left) > 15 )); do sleep 5; done
if done_all; then
  grep -q "rebless: done" "$work/summary.txt" || for gpu in $(seq 0 $((gpus - 1))); do
    echo "== rebless: done on GPU $gpu, exit $(cat "$state/rebless-gpu$gpu.rc"); $(tail -1 "$work/rebless-gpu$gpu.log")" >> "$work/summary.txt"
  done
else
  echo "== rebless: still running at $(date -u +%T)" >> "$work/summary.txt"
fi
close_state rebless.tgz
