#!/usr/bin/env bash
# A real history on the GPU: RUNS gate runs of a small subset of the suite against the committed baselines, each
# kept as a --speedgate-json report AND recorded by the gate itself (--speedgate-history), then the reports imported
# into a second store in order, change points, the page and a PNG per case.
#
#   bash lab/history_gpu_runs.sh OUT [RUNS]        # RUNS defaults to 12 (at least 10)
#
# Resumable: a run whose report is already in OUT is not run again, so a command cut off by a time limit can be
# given again as it was. Needs `pip install -e .` done and ruptures (the `history` extra) installed.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: lab/history_gpu_runs.sh OUT [RUNS]}"
runs="${2:-12}"
(( runs >= 10 )) || { echo "RUNS must be at least 10" >&2; exit 2; }
mkdir -p "$out"
python -c "import ruptures" 2>/dev/null || { echo "ruptures is missing: pip install ruptures (the history extra)" >&2; exit 2; }
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
branch="$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)"
export SPEEDGATE_COMMIT="$commit" SPEEDGATE_BRANCH="$branch"
# SUBSET (test paths, space-separated) overrides the subset, e.g. to try the script on a CPU with a small file.
read -r -a subset <<< "${SUBSET:-perftests/test_triton_elementwise.py perftests/test_triton_rowwise.py}"
for i in $(seq -w 1 "$runs"); do
    report="$out/run-$i.json"
    [[ -f "$report" ]] && continue
    start=$SECONDS
    # A regression exits 1: it is part of the history, so the loop goes on; the exit status is kept beside the report.
    set +e
    python -m pytest -p no:cacheprovider "${subset[@]}" -q --speedgate-json "$report.part" \
        --speedgate-history "$out/gate-history.db" > "$out/run-$i.log" 2>&1
    rc=$?
    set -e
    [[ -f "$report.part" ]] || { echo "run $i wrote no report (exit $rc): see $out/run-$i.log" >&2; exit 1; }
    mv "$report.part" "$report"
    echo "run $i: exit $rc, $((SECONDS - start)) s, $(tail -n 1 "$out/run-$i.log")" | tee -a "$out/runs.txt"
done
rm -f "$out/history.db"
reports=()
for i in $(seq -w 1 "$runs"); do reports+=("$out/run-$i.json"); done
python -m speedgate history import --db "$out/history.db" --commit "$commit" --branch "$branch" "${reports[@]}" \
    > "$out/import.txt"
set +e
python -m speedgate history --db "$out/history.db" > "$out/history.txt" 2>&1
echo "history exit $?" >> "$out/history.txt"
python -m speedgate history --db "$out/gate-history.db" > "$out/gate-history.txt" 2>&1
echo "history exit $?" >> "$out/gate-history.txt"
set -e
python -m speedgate history page --db "$out/history.db" --out "$out/history.html" --png "$out/png"
python - "$out" <<'PY'
import os, sqlite3, sys
out = sys.argv[1]
for name in ("history.db", "gate-history.db"):
    if not os.path.exists(f"{out}/{name}"):
        print(f"{name}: absent (no run was timed)")
        continue
    with sqlite3.connect(f"{out}/{name}") as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM results WHERE kind = 'case' AND speedup IS NOT NULL").fetchone()[0]
    print(f"{name}: {runs} runs, {rows} timed case rows")
PY
cat "$out/history.txt"
