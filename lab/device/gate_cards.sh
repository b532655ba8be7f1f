#!/usr/bin/env bash
# A selection gated against the committed files on one fresh card, in REPEAT processes one after another (default 1),
# each from empty Triton and inductor caches, its --speedgate-json report kept: evidence for `python -m speedgate
# evidence` from cards that gave none. TESTS (the files) and SELECT (-k) name the selection; by default the two
# comparisons whose H200 bands were the widest left (the K-chunked pair and the causal flash kernel beside its compiled
# reference: docs/results/gate-study-h200.md).
#   [REPEAT=N] [TESTS="FILE..."] [SELECT=EXPR] bash lab/device/gate_cards.sh OUT   (GPU 0; give the machine back
#                                                                                  between calls for another card)
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
one_gpu_call "${1:?OUT}"
read -ra tests <<< "${TESTS:-perftests/test_cutlass_matmul.py perftests/test_triton_attention.py}"
for ((i = 1; i <= ${REPEAT:-1}; i++)); do
  TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) step "gate$i" 300 python3 -m pytest "${tests[@]}" \
    -k "${SELECT:-k_chunked or flash_attention and 2048-128-causal and not gluon}" -p no:cacheprovider -q \
    --speedgate-json "$work/gate$i.json"
done
pack_call 'gate*.json'
