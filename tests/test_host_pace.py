"""Host timings gated in the pace of the host's cores (speedgate.host_pace, where a test asks with paced=True): a
compile's seconds against its bless, scaled by how long a fixed Python workload took on the host's CPUs then and
now."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from speedgate import host_pace, judging
from speedgate.baseline import merge
from speedgate.verdict import Verdict

BLESSED = {"value": 4.44, "tolerance": 1.0, "direction": "lower", "unit": "s", "host_pace_ms": 10.0,
           "measured_at": "2026-11-29T00:00:00Z", "software": {}}


def judged(value: float, now_ms: float | None, entry: dict | None = None) -> judging.MetricResult:
    return judging.judge_metric_value("t.py::test::compile_s", "t.py::test", "compile_s", "box", value, tolerance=1.0,
                                      direction="lower", unit="s", entry=BLESSED if entry is None else entry,
                                      file_found=True, host_pace_ms=now_ms)


def test_a_compile_on_slower_cores_is_judged_in_the_bless_s_pace_and_says_so() -> None:
    """The nineteenth H200 study's alarm: 9.10 s against 4.44 s (bound 8.88 s) on a host whose compiles all ran
    slower with its cores idle. With the cores at 0.55 of the bless's pace it is a pass, and the note says that as
    timed it was a regression."""
    result = judged(9.10, 18.2)
    assert result.verdict == Verdict.PASS
    assert result.paced_value is not None and math.isclose(result.paced_value, 5.0)
    assert math.isclose(result.change, 5.0 / 4.44 - 1)
    assert "the host's cores ran at 0.55 of the bless's pace" in result.note
    assert "timed 9.1 s, 5 s in that pace; as timed: regressed" in result.note
    assert result.host_pace_ms == 18.2 and result.value == 9.10  # the timed value is what the report keeps


def test_a_real_regression_fails_on_slower_cores_and_on_the_bless_s_pace() -> None:
    slower = judged(20.0, 18.2)  # 20 s on cores at 0.55 of the pace: 10.99 s in it, over the 8.88 s bound
    assert slower.verdict == Verdict.REGRESSED and "timed 20 s, 10.99 s in that pace" in slower.note
    same = judged(9.10, 10.0)  # the same pace: nothing to correct, the regression stands, and the note says the pace
    assert same.verdict == Verdict.REGRESSED and "the host's cores ran at 1.00 of the bless's pace" in same.note


def test_a_faster_host_cannot_hide_a_regression_either() -> None:
    """Cores at twice the bless's pace make a doubled compile look unchanged in seconds: in the pace it fails."""
    result = judged(8.0, 5.0)
    assert result.verdict == Verdict.REGRESSED
    assert "as timed: pass" in result.note


def test_a_pace_beyond_the_range_or_unknown_is_judged_as_timed() -> None:
    swamped = judged(9.10, 10.0 * host_pace.PACE_RANGE * 1.5)  # a host swamped by other work: not corrected for
    assert swamped.verdict == Verdict.REGRESSED and swamped.paced_value is None
    assert "beyond the 2x this gate corrects for: judged as timed" in swamped.note
    unpaced_entry = {k: v for k, v in BLESSED.items() if k != "host_pace_ms"}  # the files blessed before the pace
    assert judged(9.10, 18.2, unpaced_entry).verdict == Verdict.REGRESSED
    assert judged(9.10, None).verdict == Verdict.REGRESSED  # the ruler could not run


@pytest.mark.host_pace
def test_the_ruler_runs_in_a_fresh_interpreter_so_the_test_s_own_process_cannot_slow_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A thread of the test's holding the GIL (a compile that left work running) would slow a ruler in the test's
    process and excuse its own regression; the ruler is a child of its own, isolated from the test's imports."""
    seen: list[list[str]] = []
    real = subprocess.run

    def spy(cmd, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(list(cmd))
        return real(cmd, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    value = host_pace.host_pace_ms()
    assert value is not None and value > 0 and math.isfinite(value)
    assert seen == [[sys.executable, "-I", "-c", host_pace.RULER]]


@pytest.mark.host_pace
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
    """On a GPU host a few idle CPUs read about twice the others' time, round after round (docs/results/
    gate-study-h200.md, "The twenty-first study"): the median is the host's pace, whichever CPU a process lands on."""
    idle = {str(cpu): 6.3 for cpu in range(16)} | {"0": 9.6, "7": 12.0, "10": 14.1, "11": 12.3}
    assert host_pace.pace_of(idle) == 6.3
    assert host_pace.pace_of({"any": 4.2}) == 4.2  # no CPU could be pinned: the process's own CPU
    assert host_pace.pace_of({}) is None and host_pace.pace_of({"0": 0.0, "1": "x"}) is None  # type: ignore[dict-item]


@pytest.mark.host_pace
def test_a_ruler_that_prints_no_reading_gives_no_pace(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(host_pace, "RULER", "print('not json')")
    assert host_pace.host_pace_ms() is None
    monkeypatch.setattr(host_pace, "RULER", "import json; print(json.dumps({'reads_ms': {}}))")
    assert host_pace.host_pace_ms() is None


@pytest.mark.host_pace
def test_a_ruler_that_cannot_run_gives_no_pace(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert host_pace.host_pace_ms() is None


def test_a_re_bless_that_brings_the_pace_rewrites_an_entry_that_had_none() -> None:
    """An unpaced entry kept by a re-bless (its value inside the rewrite threshold) would stay unpaced for ever; the
    pace is a way of judging, so value and pace go in together."""
    old = {k: v for k, v in BLESSED.items() if k != "host_pace_ms"}
    doc, changes = merge({"schema_version": 1, "hardware_key": "box", "metrics": {"m": old}, "cases": {}},
                         hardware_key="box", fingerprint={}, entries={}, rewrite_fraction={},
                         metrics={"m": {**BLESSED, "value": 4.45}},
                         metric_rewrite_fraction={"m": 0.5})
    assert doc["metrics"]["m"]["host_pace_ms"] == 10.0 and doc["metrics"]["m"]["value"] == 4.45


PACED_TESTS = """
import os

def test_compile(perf):
    perf.metric("compile_s", float(os.environ.get("COMPILE_S", "4.44")), tolerance=1.0, unit="s", paced=True)
    perf.metric("peak_gib", 2.0, tolerance=0.1, unit="GiB")
    perf.metric("device_ms", 3.0, tolerance=0.1, unit="ms")
"""


def test_a_bless_records_the_pace_of_host_timings_that_ask_and_a_gate_judges_in_it(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makepyfile(test_paced=PACED_TESTS)
    monkeypatch.setattr(host_pace, "host_pace_ms", lambda: 10.0)
    project.runpytest("--update-baselines").assert_outcomes(passed=1)
    metrics = json.loads((project.path / "baselines" / "test-box.json").read_text())["metrics"]
    assert metrics["test_paced.py::test_compile::compile_s"]["host_pace_ms"] == 10.0
    assert "host_pace_ms" not in metrics["test_paced.py::test_compile::peak_gib"]  # not a time
    assert "host_pace_ms" not in metrics["test_paced.py::test_compile::device_ms"]  # a time that did not ask

    monkeypatch.setenv("COMPILE_S", "9.10")
    monkeypatch.setattr(host_pace, "host_pace_ms", lambda: 18.2)  # the host's cores at 0.55 of the bless's pace
    project.runpytest("--speedgate-json", "slow-host.json").assert_outcomes(passed=1)
    record = next(m for m in json.loads((project.path / "slow-host.json").read_text())["metrics"]
                  if m["name"] == "compile_s")
    assert record["verdict"] == "pass" and record["host_pace_ms"] == 18.2 and record["value"] == 9.10
    assert "as timed: regressed" in record["note"]

    monkeypatch.setattr(host_pace, "host_pace_ms", lambda: 10.0)  # the bless's pace: the doubled compile fails
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*compile_s regressed: 9.1 against baseline 4.44*"])


def test_compare_judges_two_reports_host_timings_in_the_old_one_s_pace() -> None:
    """`python -m speedgate compare OLD NEW` takes the gate's rule: NEW's compile seconds in OLD's pace where both
    recorded one, as timed where either did not."""
    from speedgate.compare import compare_metrics

    old = {"m": {"value": 4.44, "tolerance": 1.0, "direction": "lower", "unit": "s", "host_pace_ms": 10.0}}
    slower_host = {"m": {"value": 9.10, "unit": "s", "host_pace_ms": 18.2}}
    [row] = compare_metrics(old, slower_host)
    assert row.verdict == Verdict.PASS and "as timed: regressed" in row.note
    [row] = compare_metrics(old, {"m": {"value": 9.10, "unit": "s"}})  # NEW recorded no pace: judged as timed
    assert row.verdict == Verdict.REGRESSED


def test_a_pace_asked_of_what_is_not_a_time_is_refused_naming_the_metric(project: pytest.Pytester) -> None:
    project.makepyfile(test_gib="""
def test_memory(perf):
    perf.metric("peak_gib", 2.0, tolerance=0.1, unit="GiB", paced=True)
""")
    result = project.runpytest("--update-baselines")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*metric test_gib.py::test_memory::peak_gib has paced=True, which needs a time*'GiB'*"])
    assert not (project.path / "baselines" / "test-box.json").exists()
