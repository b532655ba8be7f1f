#!/usr/bin/env bash
# Does a slowed run's spin land at its share? (issue 46; docs/results/gate-study-h200.md, the eleventh study) A study
# of a selection, clean then every optimized side slowed by SLOWDOWNS (default 0.05), on one GPU with empty compile
# caches: the table says how far each side's slowdown landed from the clean run, and OUT/study/<run>.spins.jsonl how
# each spin was sized and settled. The default selection is the sides whose spins the eleventh study's settling cut
# most: the flex attention cases and the 8192^3 GEMMs the gate counts in SM cycles.
#   bash lab/device/injection_check.sh OUT      LIMIT (s, default 300): the study is stopped (SIGINT) after it
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
selection=(perftests/test_compile_flex.py perftests/test_triton_matmul.py perftests/test_cutlass_matmul.py -k "flex or 8192")
t0=$(date +%s)
env $(fresh) CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 15 "${LIMIT:-300}" python3 -m speedgate study "$out/study" --runs 1 \
  --slowdowns "${SLOWDOWNS:-0.05}" -- "${selection[@]}" -rs > "$work/study.log" 2>&1
echo "== study: exit $?, $(($(date +%s) - t0)) s" | tee -a "$work/summary.txt"
tail -5 "$work/study.log" | tee -a "$work/summary.txt"
