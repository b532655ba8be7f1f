#!/usr/bin/env bash
# The causal flash kernel's rounds beside its compiled reference under the profiler (lab/device/rounds_profile_plugin.py),
# in PROCESSES gate processes one after another on GPU 0 (default 5): the flash kernel's events read about 2-3% above
# its kernel's time beside that reference in some processes (docs/results/gate-study-h200.md); the trace of the rounds
# says whether the kernel ran longer or started later. lab/rounds_profile.py reads each process's file.
#   [PROCESSES=N] bash lab/device/rounds_profile_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
one_gpu_call "${1:?OUT}"
for ((i = 1; i <= ${PROCESSES:-5}; i++)); do
  export SPEEDGATE_LAB_ROUNDS=$work/rounds$i.jsonl SPEEDGATE_LAB_ROUNDS_MAX=400
  PYTHONPATH=lab/device:${PYTHONPATH:-} step "gate$i" 200 python3 -m pytest perftests/test_triton_attention.py -p rounds_profile_plugin \
    -k "test_flash_attention and 2048-128-causal and not gluon" -p no:cacheprovider -q --speedgate-json "$work/gate$i.json"
  python3 -m lab.rounds_profile "$work/rounds$i.jsonl" | tee -a "$work/summary.txt"
done
pack_call
