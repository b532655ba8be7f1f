#!/usr/bin/env bash
# Does `-n 2` pay off for a small selection (issue 49, item 6; docs/results/suite-time.md)? Each selection gated
# against the committed files from empty Triton and inductor caches, serially and under -n 2, on a host with two
# GPUs (CUDA_VISIBLE_DEVICES=0,1 both ways, as a user's runner has them), with --durations:
#   bash lab/device/small_selections.sh OUT       OUT/summary.txt; OUT/SELECTION-MODE.log and .json (the report)
# SELECTIONS (default "small attention matmul"): small, the three small Triton files; attention, the Triton and Gluon
# attention file; matmul, the Triton and CUTLASS matmul files; gluon, that file's Gluon tests alone. ORDER (default
# "serial n2"): the modes' order within a selection. The machine's first import and compile are paid first, on each GPU, by neither mode.
set -uo pipefail
cd "$(dirname "$0")/../.."
deadline=$(($(date +%s) + ${DEADLINE:-570}))
source lab/device/lib.sh
begin_call "${1:?OUT}"
declare -A files=(
  [small]="perftests/test_triton_elementwise.py perftests/test_triton_rowwise.py perftests/test_triton_l2.py"
  [attention]="perftests/test_triton_attention.py"
  [matmul]="perftests/test_triton_matmul.py perftests/test_cutlass_matmul.py"
  [gluon]="perftests/test_triton_attention.py -k gluon"
)
for gpu in 0 1; do
  CUDA_VISIBLE_DEVICES=$gpu python3 -c "import torch; torch.compile(lambda x: x.relu() + 1)(torch.ones(8, device='cuda'))" &
done
wait
for selection in ${SELECTIONS:-small attention matmul}; do
  for mode in ${ORDER:-serial n2}; do
    (( $(left) > 60 )) || { echo "== $selection $mode: not run, $(left) s left" >> "$work/summary.txt"; continue; }
    extra=(); [[ $mode == n2 ]] && extra=(-n 2)
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086,SC2046
    env $(fresh) CUDA_VISIBLE_DEVICES=0,1 timeout -s INT -k 10 $(( $(left) - 10 )) python3 -m pytest ${files[$selection]} \
      "${extra[@]}" -p no:cacheprovider -q -rs --durations=0 --speedgate-json "$work/$selection-$mode.json" \
      > "$work/$selection-$mode.log" 2>&1
    rc=$?
    wall=$(python3 -c "import time, sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0")
    echo "== $selection $mode: exit $rc, $wall s wall; $(tail -1 "$work/$selection-$mode.log")" >> "$work/summary.txt"
  done
done
cat "$work/summary.txt"
