#!/usr/bin/env bash
# One fresh card's share of the question "which card property splits a kernel's time into groups" (issue 46;
# docs/results/gate-study-h200.md): the card's facts (lab/card_layout_probe.py, and nvidia-smi's whole query), the
# K-chunked pair and the causal flash kernel beside its compiled reference in ms and in SM cycles
# (lab/cycles_probe.py), then the cases the groups show in, gated against the committed files, in REPEAT processes
# one after another (default 1): a group that is the card's shows in every process, one that is the process's does not.
#   [REPEAT=N] bash lab/device/card_groups.sh OUT      (GPU 0; one call per card: give the machine back between calls)
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
one_gpu_call "${1:?OUT}"
nvidia-smi -q -i 0 > "$work/smi.txt" 2>&1
step facts 120 python3 -m lab.card_layout_probe "$work/card.json"
step cycles 200 python3 -m lab.cycles_probe "$work" --pairs k_chunked,attn2048_compile --batches 8
for ((i = 1; i <= ${REPEAT:-1}; i++)); do
  step "gate$i" 300 python3 -m pytest perftests/test_cutlass_matmul.py perftests/test_triton_l2.py \
    perftests/test_triton_attention.py -k "k_chunked or l2_eviction or flash_attention and 2048-128-causal" \
    -p no:cacheprovider -q --speedgate-json "$work/gate$i.json"
done
pack_call smi.txt
