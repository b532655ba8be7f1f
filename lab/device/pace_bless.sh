#!/usr/bin/env bash
# The first bless of the host timings in the host's pace (speedgate.host_pace): the test files whose metrics are in
# seconds, with empty caches, blessed by a plain --update-baselines into a copy of the committed files; then only
# those metric entries (value and ruler together, as one run measured them) are taken into the committed file, and
# its comparisons' entries are left as their cards' evidence blessed them. OUT/baselines: the file that changed;
# the summary lists each metric's seconds and ruler before and after; .gpu-state/paced/ (git-ignored, kept on the warm
# machine): the committed files with it, for a next call to gate against (host_pace_check.sh's BASELINES).
#   bash lab/device/pace_bless.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
export PYTHONUNBUFFERED=1
show_step() { grep -E "passed|failed|error" "$work/$1.log" | tail -3; }
copy=$(mktemp -d)
cp baselines/*.json "$copy/"
paced=(perftests/test_compile_modes.py perftests/test_compile_training.py perftests/test_compile_regional.py
  perftests/test_compile_ladder.py perftests/test_compile_dynamic.py)
step bless 540 env $(fresh) python3 -m pytest "${paced[@]}" -p no:cacheprovider -q -rs --baseline-dir "$copy" \
  --update-baselines --speedgate-json "$work/bless.json"
mkdir -p "$out/baselines"
python3 - "$copy" "$out/baselines" >> "$work/summary.txt" <<'PY'
import json, pathlib, sys
copy, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for blessed_path in sorted(copy.glob("*.json")):
    committed_path = pathlib.Path("baselines") / blessed_path.name
    blessed, committed = json.loads(blessed_path.read_text()), json.loads(committed_path.read_text())
    taken = {k: v for k, v in blessed.get("metrics", {}).items() if "host_pace_ms" in v}
    if not taken:
        continue
    for k, v in sorted(taken.items()):
        old = committed.get("metrics", {}).get(k, {})
        print(f"{k}: {old.get('value', float('nan')):.2f} -> {v['value']:.2f} {v['unit']}, ruler {v['host_pace_ms']} ms")
    committed.setdefault("metrics", {}).update(taken)
    committed["updated_at"] = blessed["updated_at"]
    (dest / blessed_path.name).write_text(json.dumps(committed, indent=2, sort_keys=True) + "\n")
    print(f"{blessed_path.name}: {len(taken)} metric entries taken; its comparisons' entries as committed")
PY
mkdir -p .gpu-state/paced && cp baselines/*.json .gpu-state/paced/ && cp "$out/baselines/"*.json .gpu-state/paced/
cat "$work/summary.txt"
