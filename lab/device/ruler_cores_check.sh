#!/usr/bin/env bash
# Is the host-pace ruler (speedgate.host_pace) a pace of the host's cores, or of the core a process lands on? The
# ruler pinned to each CPU in turn (ROUNDS rounds; default 3), with each CPU's SMT siblings, on an idle host and then
# beside one compile-heavy test (the dynamic-shape mark_dynamic case, empty caches). One line per CPU and round.
#   bash lab/device/ruler_cores_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
probe() {
  python3 - "$1" "${ROUNDS:-3}" <<'PY'
import os, pathlib, subprocess, sys
from speedgate.host_pace import RULER
label, rounds = sys.argv[1], int(sys.argv[2])
for cpu in sorted(os.sched_getaffinity(0)):
    topo = pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    siblings = (topo / "thread_siblings_list").read_text().strip() if topo.exists() else "?"
    reads = []
    for _ in range(rounds):
        done = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-I", "-c", RULER], capture_output=True, text=True)
        reads.append(done.stdout.strip() or done.stderr.strip()[-60:])
    print(label, f"cpu {cpu:2d} siblings {siblings:6s}", " ".join(f"{float(r):6.2f}" if r.replace('.', '', 1).isdigit() else r for r in reads), flush=True)
PY
}
probe idle > "$work/idle.txt" 2>&1
cat "$work/idle.txt" >> "$work/summary.txt"
env $(fresh) python3 -m pytest perftests/test_compile_dynamic.py -k mark_dynamic -p no:cacheprovider -q \
  --baseline-dir baselines > "$work/compile.log" 2>&1 &
sleep 5
probe compiling > "$work/compiling.txt" 2>&1
wait
cat "$work/compiling.txt" >> "$work/summary.txt"
tail -1 "$work/compile.log" >> "$work/summary.txt"
