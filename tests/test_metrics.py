"""Single-valued metrics (compile seconds, recompiles, graph breaks, memory) and the recompile guard."""

from __future__ import annotations

import json

import pytest

from speedgate.verdict import Verdict, judge_metric


@pytest.mark.parametrize(
    ("value", "baseline", "tolerance", "direction", "verdict"),
    [
        (10.0, 8.0, 0.5, "lower", Verdict.PASS),  # 10 <= 12
        (13.0, 8.0, 0.5, "lower", Verdict.REGRESSED),
        (3.0, 8.0, 0.5, "lower", Verdict.IMPROVED),
        (1, 0, 0.0, "lower", Verdict.REGRESSED),  # a graph break where there were none
        (0, 0, 0.0, "lower", Verdict.PASS),
        (0.7, 1.0, 0.2, "higher", Verdict.REGRESSED),
        (1.3, 1.0, 0.2, "higher", Verdict.IMPROVED),
    ],
)
def test_judge_metric(value, baseline, tolerance, direction, verdict) -> None:
    assert judge_metric(value, baseline, tolerance, direction, file_found=True).verdict is verdict


def test_judge_metric_message_and_bad_direction() -> None:
    j = judge_metric(13.0, 8.0, 0.5, "lower", file_found=True)
    assert j.note == "regressed: 13 against baseline 8 (lower is better; tolerance 50% puts the bound at 12)"
    with pytest.raises(ValueError, match="direction"):
        judge_metric(1.0, 1.0, 0.1, "sideways", file_found=True)


METRIC_TESTS = """
import os

def test_compile(perf):
    perf.metric("compile_s", float(os.environ.get("COMPILE_S", "8.0")), tolerance=0.5, unit="s")
    perf.metric("graph_breaks", int(os.environ.get("BREAKS", "0")), tolerance=0.0)
"""


def test_metrics_are_blessed_gated_and_reported(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makepyfile(test_compile_metrics=METRIC_TESTS)
    bless = project.runpytest("--update-baselines")
    bless.assert_outcomes(passed=1)
    doc = json.loads((project.path / "baselines" / "test-box.json").read_text())
    assert doc["metrics"]["test_compile_metrics.py::test_compile::compile_s"]["value"] == 8.0
    assert doc["metrics"]["test_compile_metrics.py::test_compile::graph_breaks"] == {
        **doc["metrics"]["test_compile_metrics.py::test_compile::graph_breaks"], "value": 0, "tolerance": 0.0, "direction": "lower"}
    assert doc["cases"] == {}

    monkeypatch.setenv("COMPILE_S", "11.0")
    project.runpytest().assert_outcomes(passed=1)  # 11 s: inside 8 s + 50%

    monkeypatch.setenv("BREAKS", "2")
    result = project.runpytest("--speedgate-json", "r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*test_compile_metrics.py::test_compile::graph_breaks: graph_breaks regressed: 2 against baseline 0 (lower is better*",
        "*metric*value*baseline*change*tolerance*better*verdict*",
        "*test_compile_metrics.py::test_compile::graph_breaks*2*0*0%*lower*regressed*",
    ])
    report = json.loads((project.path / "r.json").read_text())
    assert {m["name"]: m["verdict"] for m in report["metrics"]} == {"compile_s": "pass", "graph_breaks": "regressed"}


def test_bad_metric_values(project: pytest.Pytester) -> None:
    project.makepyfile(test_bad="""
def test_nan(perf):
    perf.metric("x", float("nan"), tolerance=0.1)

def test_dup(perf):
    perf.metric("x", 1.0, tolerance=0.1)
    perf.metric("x", 1.0, tolerance=0.1)
""")
    result = project.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*metric test_bad.py::test_nan::x must be a finite number*", "*was already recorded in this test*"])


def test_a_recompilation_inside_the_rounds_fails_the_case(pytester: pytest.Pytester) -> None:
    """A compiled function that sees a new shape once the timed rounds begin (and only then)."""
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(
        test_recompile="""
import pytest
import torch
from speedgate.testing import ScriptedTimer

STATE = {"rounds": False, "n": 0}


class RoundsAwareTimer(ScriptedTimer):
    def time_each(self, fns):
        # Warm-up times one pair per call; the rounds time batches: that is when the shape starts to change.
        if len(fns) > 2:
            STATE["rounds"] = True
        return super().time_each(fns)


@pytest.fixture
def speedgate_timer():
    return RoundsAwareTimer({"reference": 2.0, "optimized": 1.0, "optimized_static": 1.0})


# backend="eager": dynamo's frames and graphs are what the gate counts; inductor's C++ build would add half a
# minute of CPU to each of these tests and nothing to what they check.
@torch.compile(dynamic=False, backend="eager")
def double(x):
    return x * 2


def reference():
    return None


def optimized():
    STATE["n"] += 1
    return double(torch.ones(4 + STATE["n"] if STATE["rounds"] else 4))


def test_recompiles(perf):
    perf.compare(reference, optimized, check=False)


def optimized_static():
    return double(torch.ones(4))


def test_static(perf):
    perf.compare(reference, optimized_static, check=False)
"""
    )
    # In subprocesses: inductor's modules cannot be imported twice in one process, and pytester's in-process
    # runs drop what each run imported.
    result = pytester.runpytest_subprocess("-k", "recompiles")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*RecompiledInRounds: speedgate: test_recompile.py::test_recompiles: torch.compile compiled * frame(s) during the timed rounds*"])
    pytester.runpytest_subprocess("-k", "static").assert_outcomes(passed=1, deselected=1)  # the same function, static shapes


def test_the_fingerprint_kept_is_the_latest_view_not_the_first() -> None:
    """A metric recorded before the timer existed must not freeze a fingerprint without the timer's fields."""
    from dataclasses import fields
    from pathlib import Path
    from types import SimpleNamespace

    from speedgate.hardware import Fingerprint
    from speedgate.ledger import WorkerReport
    from speedgate.session import SpeedgateSession

    settings = SimpleNamespace(baseline_dir=Path("baselines"), hardware_key=None, timer="auto")
    session = SpeedgateSession(settings)
    session.bench._fingerprint = Fingerprint(key="gpu-x", hardware={"kind": "gpu", "name": "X"}, software={})
    result = SimpleNamespace(hardware_key="gpu-x", case_id="c", metric_id="m", to_json=lambda: {})
    session.record_metric(result)
    session.bench.fingerprint.hardware["sm_count"] = 132  # what the CUDA timer adds when it is made
    session.record(result)
    assert session.fingerprints["gpu-x"]["hardware"]["sm_count"] == 132

    # Across xdist workers: the fuller view wins, in either order.
    sparse = {"hardware": {"kind": "gpu"}, "software": {}}
    full = {"hardware": {"kind": "gpu", "sm_count": 132}, "software": {}}
    empty = {f.name: None if f.name in ("cpu_contention", "worker") else {} if str(f.type).startswith("dict") else []
             for f in fields(WorkerReport)}
    for first, second in ((sparse, full), (full, sparse)):
        controller = SpeedgateSession(settings)
        for fp in (first, second):
            controller.absorb(WorkerReport(**{**empty, "fingerprints": {"gpu-x": fp}}).to_json())
        assert controller.fingerprints["gpu-x"] == full


def test_a_fullgraph_recompile_in_the_rounds_fails_too(pytester: pytest.Pytester) -> None:
    """torch 2.13 counts a fullgraph=True compile as a graph, not a frame: a side that recompiles on every call
    under fullgraph=True passed the gate."""
    pytester.makeini("[pytest]\naddopts = --hardware-key test-box -p no:cacheprovider\n")
    pytester.makepyfile(test_recompile="""
import torch

torch._dynamo.config.recompile_limit = 1000
torch._dynamo.config.automatic_dynamic_shapes = False
state = {"n": 0}

@torch.compile(fullgraph=True, dynamic=False, backend="eager")  # dynamo counts the graphs; no C++ build needed
def f(x):
    return x.cos()

def reference():
    return torch.ones(8)

def optimized():
    state["n"] += 1
    return f(torch.ones(8 + state["n"]))[:8] * 0 + 1  # a new shape every call: a recompilation

def test_recompiles(perf):
    perf.compare(reference, optimized)
""")
    # In a subprocess: torch._dynamo imported inside an in-process run would be dropped after it, and importing it
    # again registers inductor's test library twice.
    result = pytester.runpytest_subprocess("--speedgate-budget", "0.3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RecompiledInRounds: speedgate: test_recompile.py::test_recompiles: torch.compile "
                                 "compiled * frame(s) during the timed rounds*"])
