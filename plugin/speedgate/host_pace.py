"""The host's core pace: how long a fixed piece of Python takes on this machine now, so that a host timing (a
compile's seconds) can be gated in the pace its bless ran at, as a heavy GPU pair is counted in SM cycles so that a
card's clock does not move its speedup.

A compile's seconds moved with something the load average, the hypervisor's steal and the cgroup's throttling do not
show on a virtual machine (docs/results/gate-study-h200.md, "The twentieth study"). Whether this ruler's pace
explains that across machines is not measured yet, so a metric is judged in it only where its test asks
(perf.metric(..., paced=True)). The ruler runs in a fresh interpreter, so that nothing the test left in its own
process (a thread holding the GIL) can make the host look slow; a pace outside PACE_RANGE of the bless's is not
corrected for (judged as timed, and said).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from .verdict import Judgement, Verdict, judge_metric

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
# How far the host's pace may differ from the bless's and still be corrected for: a ruler that read more than twice
# (or under half) the bless's time says more about the moment (a host swamped by other work) than about its cores.
PACE_RANGE = 2.0
# The units a host timing may be in (perf.metric's paced=True): a pace scales a time, nothing else.
HOST_TIME_UNITS = ("s", "ms")


def host_pace_ms(timeout_s: float = 60.0) -> float | None:
    """The host's pace now, in milliseconds of the ruler (pace_of its CPUs' readings), measured in a fresh
    interpreter; None where it could not run."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", RULER], capture_output=True, text=True, timeout=timeout_s)
        reads = json.loads(done.stdout)["reads_ms"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None
    return pace_of(reads) if done.returncode == 0 else None


def pace_of(reads_ms: Mapping[str, float]) -> float | None:
    """The host's pace from the ruler's best per CPU: their median (None where there is no positive reading)."""
    values = [float(v) for v in reads_ms.values() if isinstance(v, (int, float)) and v > 0]
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Paced:
    """A host timing put in its bless's pace: `value` as the bless's host would have timed it (None where it is
    judged as timed) and the words that say so."""

    value: float | None
    words: str


def in_blessed_pace(value: float, unit: str, now_ms: float | None, blessed_ms: float | None) -> Paced:
    """`value` timed while the ruler took now_ms, in the pace of a bless whose ruler took blessed_ms: scaled by
    blessed_ms / now_ms. Judged as timed (value None) where either pace is unknown or they differ by more than
    PACE_RANGE."""
    if not (now_ms and blessed_ms and now_ms > 0 and blessed_ms > 0):
        return Paced(None, "")
    ratio = now_ms / blessed_ms  # over 1: the host's cores are slower now
    pace = (f"the host's cores ran at {1 / ratio:.2f} of the bless's pace (a fixed Python workload took {now_ms:.2f} "
            f"ms of CPU, {blessed_ms:.2f} ms at the bless)")
    if not 1 / PACE_RANGE <= ratio <= PACE_RANGE:
        return Paced(None, f"{pace}, beyond the {PACE_RANGE:g}x this gate corrects for: judged as timed")
    paced = value / ratio
    return Paced(paced, f"{pace}: timed {value:.4g}{unit and ' ' + unit}, {paced:.4g}{unit and ' ' + unit} in that pace")


def judge_in_pace(value: float, baseline: float | None, tolerance: float, direction: str, *, unit: str,
                  now_ms: float | None, blessed_ms: float | None, file_found: bool) -> tuple[Judgement, Paced]:
    """A metric's judgement, in its bless's pace where both rulers are known (in_blessed_pace), with the words of
    the pace in its note wherever the verdict is not a pass or the pace changed it: one rule for the gate
    (judging.judge_metric_value) and `python -m speedgate compare`."""
    paced = in_blessed_pace(value, unit, now_ms, blessed_ms)
    judgement = judge_metric(value if paced.value is None else paced.value, baseline, tolerance, direction,
                             file_found=file_found)
    if paced.words:
        as_timed = judge_metric(value, baseline, tolerance, direction, file_found=file_found).verdict
        if as_timed != judgement.verdict:
            judgement = Judgement(judgement.verdict, judgement.baseline, judgement.floor, judgement.change,
                                  f"{judgement.note} ({paced.words}; as timed: {as_timed.value})".strip())
        elif judgement.verdict != Verdict.PASS:
            judgement = Judgement(judgement.verdict, judgement.baseline, judgement.floor, judgement.change,
                                  f"{judgement.note} ({paced.words})")
    return judgement, paced


__all__ = ["HOST_TIME_UNITS", "PACE_RANGE", "Paced", "host_pace_ms", "in_blessed_pace", "judge_in_pace", "pace_of"]
