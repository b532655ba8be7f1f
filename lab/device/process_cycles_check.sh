#!/usr/bin/env bash
# lab/cycles_probe.py's K-chunked pair and the causal flash kernel beside its compiled reference in PROCESSES processes
# one after another on GPU 0 (default 8): both optimized sides read differently from one gate process to the next on
# one card (docs/results/gate-study-h200.md); in cycles and MHz, split by the call before, the probe says whether a
# slower process runs the kernel at a lower clock or in more cycles.
#   [PROCESSES=N] bash lab/device/process_cycles_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
one_gpu_call "${1:?OUT}"
for ((i = 1; i <= ${PROCESSES:-8}; i++)); do
  step "probe$i" 120 python3 -m lab.cycles_probe "$work/p$i" --pairs k_chunked,attn2048_compile --conditions suite --batches 8
done
pack_call
