#!/usr/bin/env bash
# Is the host-pace ruler (lab/host_pace.py) a pace of the host's cores, or of the core a process lands on? The
# ruler's workload pinned to each CPU in turn (ROUNDS rounds; default 3; one line per CPU), then the ruler itself
# (its walk over the CPUs, the median) READS times (default 10), on an idle host and beside one compile-heavy test
# (the dynamic-shape mark_dynamic case, empty caches).
#   bash lab/device/ruler_cores_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/device/lib.sh
begin_call "${1:?OUT}"
probe() {
  python3 - "$1" "${ROUNDS:-3}" "${READS:-10}" <<'PY'
import json, os, pathlib, subprocess, sys
from lab.host_pace import RULER, host_pace_ms
label, rounds, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for cpu in sorted(os.sched_getaffinity(0)):
    topo = pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    siblings = topo.read_text().strip() if topo.exists() else "?"
    got = []
    for _ in range(rounds):
        done = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-I", "-c", RULER], capture_output=True,
                              text=True)
        try:
            got.append(f"{next(iter(json.loads(done.stdout)['reads_ms'].values())):6.2f}")
        except (ValueError, KeyError, StopIteration):
            got.append(done.stderr.strip()[-60:] or "none")
    print(label, f"cpu {cpu:2d} siblings {siblings:6s}", " ".join(got), flush=True)
paces = [host_pace_ms() for _ in range(reads)]
print(label, "ruler (median of the CPUs):", " ".join(f"{p:.2f}" if p else "none" for p in paces), flush=True)
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
