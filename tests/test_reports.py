"""Report formats through pytester: Markdown summary (and GitHub's step summary)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CASES, baseline_doc, write_baseline

TESTS = CASES + """
def test_slow(perf):
    perf.compare(ref_2ms, opt_2ms)

def test_fine(perf):
    perf.compare(ref_2ms, opt_1ms, name="pair")
"""


def test_markdown_summary_regressions_first(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makepyfile(test_cases=TESTS)
    write_baseline(project.path, {"test_cases.py::test_slow": 2.0, "test_cases.py::test_fine::pair": 2.0})
    step_summary = project.path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result = project.runpytest("--speedgate-markdown", "out/summary.md")
    result.assert_outcomes(passed=1, failed=1)
    text = (project.path / "out" / "summary.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "## speedgate"
    assert "**2 cases: 1 regressed, 1 pass**" in text
    table = [line for line in lines if line.startswith("| `")]
    assert table[0].startswith("| `test_cases.py::test_slow`") and table[0].endswith("| **regressed, re-measured** |")
    assert table[1].startswith("| `test_cases.py::test_fine::pair` | 2 | 1 | 2.000x |")
    assert "| case | ref ms | opt ms | speedup | 95% CI | baseline | change | detects | rate | % peak | checked on | verdict |" in text
    assert "which side moved: the reference side is unchanged (2 -> 2 ms); the optimized side is 100% slower" in text
    assert step_summary.read_text() == "earlier step\n" + text  # appended, never overwritten


def test_junit_properties(project: pytest.Pytester) -> None:
    import xml.etree.ElementTree as ET

    project.makepyfile(test_cases=TESTS)
    write_baseline(project.path, {"test_cases.py::test_slow": 2.0, "test_cases.py::test_fine::pair": 2.0})
    project.runpytest("-o", "junit_family=xunit1", "--junitxml", "junit.xml").assert_outcomes(passed=1, failed=1)
    root = ET.parse(project.path / "junit.xml").getroot()
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")} for case in root.iter("testcase")
    }
    assert props["test_fine"]["speedgate.pair.speedup"] == "2.0"
    assert props["test_fine"]["speedgate.pair.verdict"] == "pass"
    assert props["test_fine"]["speedgate.pair.baseline"] == "2.0"
    assert props["test_slow"]["speedgate.case.verdict"] == "regressed"  # a failing test keeps its metrics
    assert props["test_slow"]["speedgate.case.speedup"] == "1.0"


def test_benchmark_json_is_read_by_pytest_benchmark(project: pytest.Pytester) -> None:
    import json
    import subprocess
    import sys

    project.makepyfile(test_cases=TESTS)
    project.runpytest("--speedgate-benchmark-json", "bench/0001_run.json").assert_outcomes(passed=2)
    path = project.path / "bench" / "0001_run.json"
    doc = json.loads(path.read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(doc)
    names = {b["fullname"] for b in doc["benchmarks"]}
    assert "test_cases.py::test_fine::pair[optimized]" in names and "test_cases.py::test_slow[reference]" in names
    fine = next(b for b in doc["benchmarks"] if b["fullname"] == "test_cases.py::test_fine::pair[optimized]")
    assert fine["stats"]["median"] == pytest.approx(1e-3) and fine["extra_info"]["speedup"] == 2.0
    # pytest-benchmark's own loader and comparison table read it.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(path), "--columns", "min,median,rounds"],
        capture_output=True, text=True, cwd=project.path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "test_fine::pair[optimized]" in proc.stdout and "test_slow[reference]" in proc.stdout


def run_compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speedgate", "compare", *args], capture_output=True, text=True)


def test_compare_two_baseline_files(tmp_path) -> None:
    import json

    from conftest import baseline_doc

    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    old.write_text(json.dumps(baseline_doc({"a": 2.0, "b": 2.0, "c": 2.0, "gone": 1.0})))
    doc = baseline_doc({"a": 1.5, "b": 2.05, "c": 2.6, "fresh": 3.0})
    doc["fingerprint"]["software"]["torch"] = "9.9"
    new.write_text(json.dumps(doc))
    proc = run_compare(str(old), str(new))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a regression
    lines = proc.stdout.splitlines()
    assert "software: torch 0.0 -> 9.9" in lines
    table = [line for line in lines if line.split(" ", 1)[0] in ("a", "b", "c", "fresh", "gone")]
    assert table[0].startswith("a ") and table[0].endswith("regressed")
    assert "-25.0%" in table[0]
    verdicts = {line.split()[0]: line.split()[-1] for line in table}
    assert verdicts == {"a": "regressed", "b": "pass", "c": "improved", "fresh": "new", "gone": "missing"}
    assert lines[-1] == "1 regressed, 1 improved, 1 within tolerance, 1 new, 1 missing"


def test_compare_json_reports_and_bad_input(project: pytest.Pytester, tmp_path) -> None:
    project.makepyfile(test_cases=TESTS)
    project.runpytest("--speedgate-json", "r1.json").assert_outcomes(passed=2)
    project.runpytest("--speedgate-json", "r2.json").assert_outcomes(passed=2)
    proc = run_compare(str(project.path / "r1.json"), str(project.path / "r2.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 regressed, 0 improved, 2 within tolerance, 0 new, 0 missing" in proc.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    proc = run_compare(str(bad), str(project.path / "r2.json"))
    assert proc.returncode == 2 and "bad.json: cannot be read as JSON" in proc.stderr
    proc = run_compare(str(project.path / "r1.json"), str(project.path / "r2.json"), "--tolerance", "3")
    assert proc.returncode == 2 and "must be a fraction" in proc.stderr


def test_each_comparison_says_when_it_was_judged_and_how_busy_the_host_was(project: pytest.Pytester) -> None:
    """A launch-bound pair read 2.2 times its blessed time on both sides in one worker of a -n 2 study, and nothing in
    the report said what else ran then (docs/results/gate-study.md, section 10): each record carries its verdict's
    time and the host's load average with the cores it had."""
    import os
    from datetime import datetime

    project.makepyfile(test_cases=TESTS)
    project.runpytest("--speedgate-json", "r.json").assert_outcomes(passed=2)
    cases = json.loads((project.path / "r.json").read_text())["cases"]
    assert len(cases) == 2
    for case in cases:
        assert datetime.fromisoformat(case["judged_at"].replace("Z", "+00:00")).tzinfo is not None
        assert case["host_cores"] == len(os.sched_getaffinity(0))
        assert isinstance(case["host_load"], float) and case["host_load"] >= 0.0


def test_artifacts_of_a_failing_case(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the kernel below runs in the interpreter; the clock is scripted
    project.makepyfile(
        kern="""
import triton
import triton.language as tl

@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
""",
        test_cases=TESTS + """
import torch
from kern import double_kernel

def test_kernel(perf):
    x = torch.ones(8)
    out = torch.empty_like(x)
    double_kernel[(1,)](x, out, 8, BLOCK=8)
    perf.assert_close(out, x * 2)
""",
    )
    monkeypatch.delenv("TRITON_INTERPRET")  # time the scripted pairs
    write_baseline(project.path, {"test_cases.py::test_slow": 2.0, "test_cases.py::test_fine::pair": 2.0})
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = project.runpytest("--speedgate-artifacts", "art", "-k", "slow or kernel", "--correctness-only")
    result.assert_outcomes(passed=2, deselected=1)
    assert not (project.path / "art").exists()  # nothing failed: nothing kept
    monkeypatch.delenv("TRITON_INTERPRET")
    result = project.runpytest("--speedgate-artifacts", "art", "-k", "slow")
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(["*inspect the artifacts kept under*art*", "*kept in *art/test_cases.py_test_slow*"])
    folder = project.path / "art" / "test_cases.py_test_slow"
    results = json.loads((folder / "results.json").read_text())
    assert results[0]["verdict"] == "regressed"
    samples = json.loads((folder / "samples.json").read_text())["test_cases.py::test_slow"]
    assert samples["reference_ms"][:3] == [2.0, 2.0, 2.0] and samples["first_measurement"]["optimized_ms"][0] == 2.0
    assert "SpeedRegression" in (folder / "failure.txt").read_text()
    assert "re-bless with `pytest --update-baselines 'test_cases.py::test_slow'`" in (folder / "README.txt").read_text()
    assert (folder / "triton" / "kern.double_kernel.py").read_text().startswith("def double_kernel")


def test_chart_png(project: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib", reason="the chart is optional: pip install 'pytest-speedgate[chart]'")
    project.makepyfile(test_cases=TESTS)
    write_baseline(project.path, {"test_cases.py::test_slow": 2.0})
    project.runpytest("--speedgate-chart", "out/run.png").assert_outcomes(passed=1, failed=1)
    data = (project.path / "out" / "run.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


METRIC_TEST = CASES + """
def test_compile(perf):
    perf.compare(ref_2ms, opt_1ms)
    perf.metric("compile_s", 30.0, tolerance=0.2, unit="s")
"""


def test_metrics_reach_the_markdown_summary_and_the_budget_line(project: pytest.Pytester) -> None:
    """A metric regression fails the test; the Markdown (and so GITHUB_STEP_SUMMARY) must say so, not '1 pass'."""
    import json

    path = write_baseline(project.path, {"test_cases.py::test_compile": 2.0})
    doc = json.loads(path.read_text())
    doc["metrics"] = {"test_cases.py::test_compile::compile_s": {
        "value": 10.0, "tolerance": 0.2, "direction": "lower", "unit": "s", "measured_at": "2026-01-01T00:00:00Z",
        "software": {}}}
    path.write_text(json.dumps(doc))
    project.makepyfile(test_cases=METRIC_TEST)
    result = project.runpytest("--speedgate-markdown", "summary.md")
    result.assert_outcomes(failed=1)
    text = (project.path / "summary.md").read_text()
    assert "**1 cases: 1 pass**" in text and "**1 metrics: 1 regressed**" in text
    assert "| `test_cases.py::test_compile::compile_s` | 30 s | 10 s |" in text
    result.stdout.fnmatch_lines(["*rounds of 1 comparisons took * s: *% timed work, *% statistics, *% host overhead*"])


def test_compare_judges_metrics_and_refuses_files_with_nothing_in_common(tmp_path) -> None:
    import json

    from conftest import baseline_doc

    def with_metric(doc: dict, value: float) -> dict:
        doc["metrics"] = {"t.py::m::compile_s": {"value": value, "tolerance": 0.2, "direction": "lower", "unit": "s",
                                                  "measured_at": "2026-01-01T00:00:00Z", "software": {}}}
        return doc

    old, new, other = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "other.json"
    old.write_text(json.dumps(with_metric(baseline_doc({"a": 2.0}), 10.0)))
    new.write_text(json.dumps(with_metric(baseline_doc({"a": 2.0}), 30.0)))
    proc = run_compare(str(old), str(new))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the metric regressed
    assert "metrics: 1 regressed, 0 improved, 0 within tolerance, 0 new, 0 missing" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "0 regressed, 0 improved, 1 within tolerance, 0 new, 0 missing"
    other.write_text(json.dumps(baseline_doc({"b": 2.0}, key="other-box")))
    proc = run_compare(str(old), str(other))
    assert proc.returncode == 2 and "share no case and no metric" in proc.stderr


def test_chart_draws_metrics_too(tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="the chart is optional: pip install 'pytest-speedgate[chart]'")
    from speedgate.chart import _metric_goodness, render
    from speedgate.results import CompareResult, MetricResult
    from speedgate.verdict import Verdict

    case = CompareResult(case_id="t.py::a", nodeid="t.py::a", name=None, hardware_key="k", timed=True,
                         verdict=Verdict.PASS, note="", tolerance=0.1, speedup=2.0, ci_low=1.9, ci_high=2.1, baseline=2.0)
    slow = MetricResult(metric_id="t.py::a::compile_s", nodeid="t.py::a", name="compile_s", hardware_key="k", value=30.0,
                        tolerance=0.2, direction="lower", unit="s", verdict=Verdict.REGRESSED, note="", baseline=10.0)
    labels = render([case], tmp_path / "c.png", "t", [slow])
    assert labels == ["t :: a", "metric: t :: a::compile_s"]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    rel, low, high = _metric_goodness(slow)
    assert rel == pytest.approx(1 / 3) and rel < low < 1 < high  # three times slower: left of its band


def test_compare_says_which_side_moved_and_the_detection_power(tmp_path) -> None:
    import json

    from conftest import baseline_doc

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(baseline_doc({"a": 2.0, "b": 2.0})))
    doc = baseline_doc({"a": 2.0, "b": 2.0})
    doc["cases"]["a"].update(speedup=1.5, ci_low=1.49, ci_high=1.51, reference_ms=3.0, optimized_ms=2.0)  # ref 50% slower
    new.write_text(json.dumps(doc))
    proc = run_compare(str(old), str(new))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("a: " in proc.stdout and "which side moved: the reference side is 50% slower than when blessed (2 -> 3 ms); "
            "the optimized side is 100% slower than when blessed (1 -> 2 ms)") in proc.stdout
    assert "detection power: 2 timed cases catch a drop of their speedup from this run's reading of at least" in proc.stdout
    # a already reads under its floor (0.0% from here); b lets the most through, and is named
    [power] = [line for line in proc.stdout.splitlines() if line.startswith("detection power")]
    assert "best 0.0%" in power and power.endswith(": b)"), power


def test_the_summary_says_what_it_could_not_gate_and_why_a_tolerance_is_wide(pytester: pytest.Pytester) -> None:
    """A file that lacks cases this run measured: one loud line at the top, not only rows of "new". A tolerance over
    10%: where it came from and what the case still catches. Where the comparisons' time went, stage by stage."""
    from conftest import CASES, DEFAULT_TIMES, SCRIPTED_CONFTEST

    pytester.makeconftest(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_cases=CASES + """
import os

def test_blessed(perf):
    perf.compare(ref_2ms, opt_1ms, tolerance=0.35)
    perf.metric(os.environ.get("METRIC_NAME", "peak_gib"), 1.0, tolerance=0.1, unit="GiB")

def test_added_later(perf):
    perf.compare(ref_2ms, opt_500us)
""")
    pytester.runpytest("--update-baselines", "-k", "blessed").assert_outcomes(passed=1, deselected=1)

    def top_line(run: pytest.RunResult) -> str:
        run.assert_outcomes(passed=2)
        return run.stdout.lines[run.stdout.lines.index(next(x for x in run.stdout.lines if "= speedgate =" in x)) + 1]

    result = pytester.runpytest()
    assert top_line(result).startswith("speedgate: not gated: 1 of the 2 comparisons measured on test-box have no entry in ")

    def run_with(*args: str, metric: str) -> pytest.RunResult:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("METRIC_NAME", metric)
            return pytester.runpytest(*args)

    # A metric the file lacks (here renamed, as a case's metric is when what it measures changes) is said there too:
    # with the comparisons the file lacks in one line, or alone.
    assert top_line(run_with(metric="peak_fresh_process_gib")).startswith(
        "speedgate: not gated: 1 of the 2 comparisons and 1 of the 1 metrics measured on test-box have no entry in ")
    run_with("--update-baselines", metric="peak_gib").assert_outcomes(passed=2)
    assert top_line(run_with(metric="peak_fresh_process_gib")).startswith(
        "speedgate: not gated: 1 of the 1 metrics measured on test-box have no entry in ")
    result.stdout.fnmatch_lines(["test_cases.py::test_blessed: tolerance 35%, pinned by the case*; catches a drop of *% or more from this run's reading"])
    result.stdout.fnmatch_lines(["2 comparisons took * s: first calls (compile, autotune) * s, output checks * s, warm-up "
                                 "and rounds * s, audits (profiler, ceilings, re-check) * s, judging (re-measure, calibration) * s"])
@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_summary_tells_an_entry_timed_otherwise_from_a_missing_one(pytester: pytest.Pytester,
                                                                       xdist: tuple[str, ...]) -> None:
    """An entry blessed in another unit (or from an idle device, where the case now replays CUDA graphs) reads "new"
    as a missing one does, but the file has it: the top line must not say "no entry", and must say to bless again,
    under pytest-xdist too (the workers' records carry the blessed speedup that tells the two apart)."""
    from conftest import CASES, DEFAULT_TIMES, SCRIPTED_CONFTEST

    pytester.makeconftest(SCRIPTED_CONFTEST.format(times=DEFAULT_TIMES))
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_cases=CASES + """
def test_blessed(perf):
    perf.compare(ref_2ms, opt_1ms)
""")
    pytester.runpytest("--update-baselines").assert_outcomes(passed=1)
    [path] = (pytester.path / "baselines").glob("test-box.json")
    doc = json.loads(path.read_text())
    [entry] = doc["cases"].values()
    entry["timer"] = "cuda-sm-cycles-held"  # blessed in SM cycles; the scripted timer counts milliseconds
    path.write_text(json.dumps(doc))
    result = pytester.runpytest(*xdist)
    result.assert_outcomes(passed=1)
    top = result.stdout.lines[result.stdout.lines.index(next(x for x in result.stdout.lines if "= speedgate =" in x)) + 1]
    assert top.startswith("speedgate: not gated: 1 of the 1 comparisons measured on test-box have entries in "), top
    assert "timed otherwise" in top and "have no entry" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*blessed in SM cycles (cuda-sm-cycles-held), timed in milliseconds (scripted): "
                                 "re-bless this case*"])


@pytest.mark.timing
def test_compare_into_a_pipe_closed_early_ends_without_a_traceback(tmp_path: Path) -> None:
    """`python -m speedgate compare OLD NEW | head`: head leaves after its lines; compare must not end in a
    BrokenPipeError traceback."""
    cases = {f"test_many.py::test_{i}": 2.0 for i in range(3000)}  # more output than a pipe's buffer holds
    old = tmp_path / "old.json"
    old.write_text(json.dumps(baseline_doc(cases)))
    proc = subprocess.Popen([sys.executable, "-m", "speedgate", "compare", str(old), str(old)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith("OLD ")
    proc.stdout.close()  # what head does once it has its lines
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.timing
@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_summary_says_what_the_tests_spent_outside_their_comparisons(project: pytest.Pytester,
                                                                       xdist: tuple[str, ...]) -> None:
    """Most of a compile suite's time is the tests' own (compiling, fresh processes), not speedgate's comparisons:
    the summary says how much, and which tests spent it (workers send their durations to the controller)."""
    project.makepyfile(test_cases=CASES + """
import time

def test_slow_setup(perf):
    time.sleep(0.5)  # work of the test's own: a compile, a fresh process
    perf.compare(ref_2ms, opt_1ms)

def test_quick(perf):
    perf.compare(ref_2ms, opt_1ms)
""")
    result = project.runpytest_subprocess(*xdist, "--speedgate-json", "run.json")
    result.assert_outcomes(passed=2)
    seconds = json.loads((project.path / "run.json").read_text())["test_seconds"]
    assert set(seconds) == {"test_cases.py::test_slow_setup", "test_cases.py::test_quick"}
    assert seconds["test_cases.py::test_slow_setup"] >= 0.5
    line = next(line for line in result.stdout.lines if "tests using perf took" in line)
    found = re.search(r"^2 tests using perf took ([\d.]+) s: comparisons ([\d.]+) s, the tests' own work ([\d.]+) s "
                      r"\(building inputs, compiling, fresh processes; the most: test_cases.py::test_slow_setup ([\d.]+) s",
                      line)
    assert found, line
    total, compared, own, slowest = map(float, found.groups())
    assert own >= 0.5 and slowest >= 0.5 and abs(total - compared - own) < 0.15, line


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_json_report_lists_a_failed_test_that_left_no_record(project: pytest.Pytester,
                                                                 xdist: tuple[str, ...]) -> None:
    """The 2 x H200 gate study of 2026-11-28: a clean run's test raised in its audit before its comparison was
    judged, so no case carried test_failed and the study's count of false alarms missed it. The report lists every
    failed test that used perf, and what failed it (under -n, from the worker that ran it)."""
    project.makepyfile(test_cases=CASES + """
def test_fine(perf):
    perf.compare(ref_2ms, opt_1ms, name="pair")

def test_raises(perf):
    perf.compare(ref_2ms, lambda: 1 / 0, name="pair")
""")
    run = project.runpytest_subprocess if xdist else project.runpytest
    run("--speedgate-json", "run.json", *xdist).assert_outcomes(passed=1, failed=1)
    doc = json.loads((project.path / "run.json").read_text())
    assert doc["failed_tests"] == ["test_cases.py::test_raises"]
    assert [c["case_id"] for c in doc["cases"]] == ["test_cases.py::test_fine::pair"]
    # and what failed it: pytest's one-line crash message
    assert doc["failure_causes"] == {
        "test_cases.py::test_raises": "KeyError: \"ScriptedTimer has no times for callable '<lambda>'\""}


def test_a_failure_cause_is_the_crash_message_first_line_cut_short() -> None:
    """What the JSON report's failure_causes keeps of a failed phase: pytest's one-line crash message; else the long
    report's last line (a report made from a string, as a plugin's may be); None where there is nothing."""
    from types import SimpleNamespace

    from speedgate.ledger import CAUSE_CHARS, RunLedger, failure_cause

    crash = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message="ValueError: no\nmore")))
    assert failure_cause(crash) == "ValueError: no"
    assert failure_cause(SimpleNamespace(longrepr="Traceback ...\n  line\nRuntimeError: plain")) == "RuntimeError: plain"
    assert failure_cause(SimpleNamespace(longrepr=None)) is None
    long = failure_cause(SimpleNamespace(longrepr="E" * 1000))
    assert long is not None and len(long) == CAUSE_CHARS and long.endswith("...")
    ledger = RunLedger()  # the first failed phase's cause is the one kept (a teardown's error after a failed call)
    ledger.note_outcome("t.py::test_a", "call", False, True, "AssertionError: slower")
    ledger.note_outcome("t.py::test_a", "teardown", False, True, "RuntimeError: cleanup")
    assert ledger.failure_causes == {"t.py::test_a": "AssertionError: slower"}


def test_the_workers_line_names_a_lost_worker_beside_those_that_reported() -> None:
    # A worker whose closing report never came was left out of where the run's workers ran.
    from speedgate.report import header

    workers = {"gw0": {"device": "0", "shared": False}, "gw10": {"device": "1", "shared": False}}
    lines = header([], docs={}, errors={}, paths={}, updating=False, gpu_state={}, ceilings={}, fingerprints={},
                   workers=workers, lost_workers=["gw2", "gw0"])
    assert lines == ["xdist workers: gw0 on GPU 0, gw10 on GPU 1, gw2 lost (its closing report never came)"]
    assert header([], docs={}, errors={}, paths={}, updating=False, gpu_state={}, ceilings={}, fingerprints={},
                  workers={}, lost_workers=[]) == []
