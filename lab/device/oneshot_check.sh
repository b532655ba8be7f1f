#!/usr/bin/env bash
# The one-shot all-reduce's cases on two GPUs, blessed into the 2x file with --speedgate-calibrate 2, then the lab's
# sweep of the kernel's configs (lab/oneshot_forms.py; CONFIGS: its --configs, default a few around the suite's):
#   bash lab/device/oneshot_check.sh OUT      OUT: the changed baseline files, the logs, the sweep's JSON
# After a change of the kernel, restart the blessed entries' evidence on the CPU (python -m speedgate evidence FILE
# --restart CASE_ID, one per size), so that the form before's processes do not set their tolerances.
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
env $(fresh) timeout -s INT -k 15 300 python3 -m pytest perftests/test_nccl.py -k oneshot -p no:cacheprovider -q -rs \
  --baseline-dir .gpu-state/baselines --update-baselines --speedgate-calibrate 2 \
  --speedgate-json "$work/nccl-oneshot.json" > "$work/nccl.log" 2>&1
echo "== bless: exit $?"
for file in .gpu-state/baselines/*.json; do
  cmp -s "$file" "baselines/$(basename "$file")" || cp "$file" "$out/"
done
grep -E "oneshot|passed|failed|Error|assert" "$work/nccl.log" | cut -c1-250 | tail -30
# shellcheck disable=SC2086  # CONFIGS: several words on purpose
timeout 200 python3 -m lab.oneshot_forms "$work/forms" --sizes 64 256 1024 --calls 20 \
  --configs ${CONFIGS:-32:16:16:0.5 32:16:32:0.5 32:8:16:0.5 16:16:16:0.5} > "$work/forms.log" 2>&1
echo "== forms: exit $?"
tail -40 "$work/forms.log"
