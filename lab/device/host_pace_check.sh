#!/usr/bin/env bash
# Does the host-pace ruler (lab/host_pace.py) follow a compile's seconds on a GPU host? The dynamic-shape cases'
# compile passes, each run a fresh process with empty caches, with 0, BUSY_SOME and BUSY_MOST spinning host processes
# beside them (other tenants' load on the host's cores: it moves the compile's wall time by taking turns on the cores,
# which the ruler's CPU time does not count, and may move the cores' clock, which it does). Each run's report holds the
# compile seconds (compile_pass_s_*); the ruler (host_pace_ms) is read before and after each run; the summary prints
# them side by side and the seconds over the ruler's mean.
#   bash lab/device/host_pace_check.sh OUT        BUSY_SOME (default 8), BUSY_MOST (default 14), RUNS (default 2)
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
export PYTHONUNBUFFERED=1
show_step() { grep -E "passed|failed" "$work/$1.log" | tail -1; }
ruler() { python3 -c "from lab.host_pace import host_pace_ms; print(host_pace_ms())"; }
for busy in 0 "${BUSY_SOME:-8}" "${BUSY_MOST:-14}"; do
  spinners=()
  for _ in $(seq 1 "$busy"); do python3 -c "while True: pass" & spinners+=($!); done
  for run in $(seq 1 "${RUNS:-2}"); do
    ruler > "$work/busy$busy-$run.pace"
    step "busy$busy-$run" 240 env $(fresh) python3 -m pytest perftests/test_compile_dynamic.py -p no:cacheprovider -q \
      --baseline-dir baselines --speedgate-json "$work/busy$busy-$run.json"
    ruler >> "$work/busy$busy-$run.pace"
  done
  (( busy > 0 )) && kill "${spinners[@]}" 2> /dev/null
  wait 2> /dev/null
done
python3 - "$work" >> "$work/summary.txt" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("busy*.json")):
    before, after = (float(x) for x in path.with_suffix(".pace").read_text().split())
    pace = (before + after) / 2
    for m in json.loads(path.read_text()).get("metrics", []):
        if m.get("unit") == "s":
            print(f"{path.stem:10s} {m['name']:30s} {m['value']:7.2f} s  ruler {before:6.2f}/{after:6.2f} ms  "
                  f"s/ruler {m['value'] / pace:.3f}  {m['verdict']}")
PY
cat "$work/summary.txt"
