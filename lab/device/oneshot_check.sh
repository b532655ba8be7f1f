#!/usr/bin/env bash
# The one-shot all-reduce's cases on two GPUs, blessed into the 2x file: bash lab/device/oneshot_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
work=$out/oneshot
mkdir -p "$work" .gpu-state/baselines
cp baselines/*.json .gpu-state/baselines/
source lab/device/lib.sh
export PYTHONUNBUFFERED=1
install_deps
list_cards | tee "$work/cards.txt"
timeout -s INT -k 15 400 python3 -m pytest perftests/test_nccl.py -k oneshot -p no:cacheprovider -q -rs \
  --baseline-dir .gpu-state/baselines --update-baselines --speedgate-json "$work/nccl-oneshot.json" > "$work/nccl.log" 2>&1
echo "== exit $?"
for file in .gpu-state/baselines/*.json; do
  cmp -s "$file" "baselines/$(basename "$file")" || cp "$file" "$out/"
done
grep -E "oneshot|passed|failed|Error|assert" "$work/nccl.log" | cut -c1-250 | tail -30
