#!/usr/bin/env bash
# One GPU, one call: on an H200 the formerly blind cases blessed in one process (--speedgate-calibrate 2, empty compile
# caches) into the H200 file; on any other card a clean gate run of them against the committed files, its report
# kept as evidence.   bash lab/device/one_card.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT}
work=$out/card
mkdir -p "$work" .gpu-state/baselines
cp baselines/*.json .gpu-state/baselines/
source lab/device/lib.sh
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d)
install_deps
list_cards | tee "$work/cards.txt"
common=(-p no:cacheprovider -q -rs --baseline-dir .gpu-state/baselines --speedgate-json "$work/report.json")
if python3 -c "import torch,sys; sys.exit(0 if 'H200' in torch.cuda.get_device_name(0) else 1)"; then
  timeout -s INT -k 15 400 python3 -m pytest "${heavy[@]}" "${common[@]}" --update-baselines --speedgate-calibrate 2 > "$work/log" 2>&1
else
  timeout -s INT -k 15 400 python3 -m pytest "${heavy[@]}" "${common[@]}" > "$work/log" 2>&1
fi
echo "== exit $?"
for file in .gpu-state/baselines/*.json; do cmp -s "$file" "baselines/$(basename "$file")" || cp "$file" "$out/"; done
grep -E "passed|failed|regressed|inconclusive|pick-changed|improved" "$work/log" | cut -c1-200 | tail -12
