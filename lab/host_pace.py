"""The host's core pace, a lab instrument: how long a fixed piece of Python takes on this machine's CPUs now.

A compile's seconds moved between GPU machines with their cores idle (docs/results/gate-study-h200.md, "The twentieth
study"), which the load average, the hypervisor's steal and the cgroup's throttling did not show. This ruler was built
to follow them and judge compile seconds in the pace of their bless; on two H200 hosts it did not follow them
(docs/results/gate-study-h200.md, "The twenty-first study"), so the gate judges compile seconds as timed and the
ruler stays here, for the device checks that measure it (lab/device/ruler_cores_check.sh, host_pace_check.sh).

    python -m lab.host_pace        # the host's pace now, and each CPU's reading

The ruler runs in a fresh interpreter, so that nothing left running in the caller's process (a thread holding the
GIL) can make the host look slow.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Mapping

# A fixed workload of the interpreter's everyday work (formatting, hashing, sorting), a few milliseconds of a current
# server core, timed in the process's CPU time with the garbage collector off: the pace of a core while it runs the
# ruler. Wall time would count other work taking turns on the cores, which the load average shows and the pace must
# not (docs/results/cpu.md, "2026-11-29: The host's pace"). A virtual CPU's own pace depends on what shares its
# physical core: one process, landing on one CPU, read that CPU (on a GPU host some CPUs read half the others' pace,
# each the same round after round: docs/results/gate-study-h200.md, "The twenty-first study"). So the ruler walks
# the process's CPUs, at most RULER_CPUS of them spread evenly, pinned to each in turn, best of RULER_REPEATS on
# each; the host's pace is the median of those bests (pace_of), which a minority of slow CPUs does not move.
RULER_REPEATS = 3
RULER_CPUS = 16
RULER = f"""
import gc, json, os, time
def work():
    table = {{}}
    for i in range(20000):
        key = f"n{{i % 997}}_{{i}}"
        table[key] = len(key) ^ i
    return len(sorted(table, key=table.__getitem__))
def best():
    least = float("inf")
    for _ in range({RULER_REPEATS}):
        start = time.process_time()
        work()
        least = min(least, time.process_time() - start)
    return least * 1e3
gc.disable()
cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
cpus = [cpus[i * len(cpus) // {RULER_CPUS}] for i in range({RULER_CPUS})] if len(cpus) > {RULER_CPUS} else cpus
reads = {{}}
for cpu in cpus:
    try:
        os.sched_setaffinity(0, {{cpu}})
    except OSError:
        continue
    reads[cpu] = best()
print(json.dumps({{"reads_ms": reads or {{"any": best()}}}}))
"""


def host_pace_ms(timeout_s: float = 60.0) -> float | None:
    """The host's pace now, in milliseconds of the ruler (pace_of its CPUs' readings); None where it could not run."""
    reads = readings(timeout_s)
    return None if reads is None else pace_of(reads)


def pace_of(reads_ms: Mapping[str, float]) -> float | None:
    """The host's pace from the ruler's best per CPU: their median (None where there is no positive reading)."""
    values = [float(v) for v in reads_ms.values() if isinstance(v, (int, float)) and v > 0]
    return statistics.median(values) if values else None


def readings(timeout_s: float = 60.0) -> dict[str, float] | None:
    """The ruler's best per CPU now, in milliseconds (by CPU number; "any" where no CPU could be pinned), measured in a
    fresh interpreter; None where it could not run."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", RULER], capture_output=True, text=True, timeout=timeout_s)
        reads = json.loads(done.stdout)["reads_ms"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None
    return reads if done.returncode == 0 and isinstance(reads, dict) else None


def main() -> int:
    reads = readings()
    if reads is None:
        print("host_pace: the ruler could not run", file=sys.stderr)
        return 1
    print(f"host pace {pace_of(reads)} ms (median of {len(reads)} CPU(s)); per CPU: "
          + " ".join(f"{cpu}={ms:.2f}" for cpu, ms in reads.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
