"""lab/host_pace.py on the CPU: the ruler runs in a fresh interpreter, walks the process's CPUs one by one, and its
pace is the median of their readings (what it read on GPU hosts is the device checks' own)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from lab import host_pace


def test_the_ruler_runs_in_a_fresh_interpreter_so_the_caller_s_process_cannot_slow_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    real = subprocess.run

    def spy(cmd, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(list(cmd))
        return real(cmd, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    value = host_pace.host_pace_ms()
    assert value is not None and value > 0 and math.isfinite(value)
    assert seen == [[sys.executable, "-I", "-c", host_pace.RULER]]


def test_the_ruler_walks_the_process_s_cpus_one_by_one() -> None:
    """One process lands on one CPU, whose pace is what shares its physical core; the ruler reads each CPU it may
    run on (at most RULER_CPUS, spread evenly), pinned to it in turn."""
    done = subprocess.run([sys.executable, "-I", "-c", host_pace.RULER], capture_output=True, text=True, check=True)
    reads = json.loads(done.stdout)["reads_ms"]
    cpus = sorted(os.sched_getaffinity(0))
    expected = cpus if len(cpus) <= host_pace.RULER_CPUS else [
        cpus[i * len(cpus) // host_pace.RULER_CPUS] for i in range(host_pace.RULER_CPUS)]
    assert sorted(map(int, reads)) == expected and all(v > 0 for v in reads.values())


def test_a_minority_of_slow_cpus_does_not_move_the_pace() -> None:
    idle = {str(cpu): 6.3 for cpu in range(16)} | {"0": 9.6, "7": 12.0, "10": 14.1, "11": 12.3}
    assert host_pace.pace_of(idle) == 6.3
    assert host_pace.pace_of({"any": 4.2}) == 4.2  # no CPU could be pinned: the process's own CPU
    assert host_pace.pace_of({}) is None and host_pace.pace_of({"0": 0.0, "1": "x"}) is None  # type: ignore[dict-item]


def test_a_ruler_that_cannot_run_or_prints_no_reading_gives_no_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_pace, "RULER", "print('not json')")
    assert host_pace.host_pace_ms() is None
    monkeypatch.setattr(host_pace, "RULER", "import json; print(json.dumps({'reads_ms': {}}))")
    assert host_pace.host_pace_ms() is None
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert host_pace.host_pace_ms() is None
