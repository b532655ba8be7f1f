"""Blessing as a pure function, typed results across the JSON boundary, and the measurement policy: no pytest run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from speedgate.blessing import REWRITE_SHARE_OF_TOLERANCE, bless, case_entry
from speedgate.measure import Policy
from speedgate.results import CompareResult, MetricResult
from speedgate.verdict import Verdict, by_severity

FINGERPRINT = {"hardware": {"kind": "gpu", "name": "X"}, "software": {"torch": "2.11"}}


def result(case_id: str, speedup: float, **extra: object) -> CompareResult:
    fields = dict(case_id=case_id, nodeid=case_id, name=None, hardware_key="gpu-x", timed=True, verdict=Verdict.PASS,
                  note="", tolerance=0.1, speedup=speedup, reference_ms=2.0, optimized_ms=2.0 / speedup,
                  ci_low=speedup * 0.99, ci_high=speedup * 1.01, rounds=100, timer="cuda-events")
    fields.update(extra)
    return CompareResult(**fields)  # type: ignore[arg-type]


def metric(metric_id: str, value: float) -> MetricResult:
    return MetricResult(metric_id=metric_id, nodeid="t.py::m", name="m", hardware_key="gpu-x", value=value,
                        tolerance=0.3, direction="lower", unit="s", verdict=Verdict.PASS, note="")


def blessed(existing: dict | None, cases: list[CompareResult], metrics: list[MetricResult] = ()) -> tuple[dict, dict]:
    doc, changes = bless(existing, hardware_key="gpu-x", fingerprint=FINGERPRINT, cases=cases, metrics=list(metrics),
                         measured_at="2026-11-23T00:00:00Z")
    return doc, {c.case_id: c.action for c in changes}


def test_new_entries_are_rounded_and_carry_when_and_what() -> None:
    doc, actions = blessed(None, [result("t.py::a", 2.123456789)], [metric("t.py::m::compile_s", 8.0)])
    entry = doc["cases"]["t.py::a"]
    assert actions == {"t.py::a": "added", "t.py::m::compile_s": "added"}
    assert entry["speedup"] == 2.123 and entry["measured_at"] == "2026-11-23T00:00:00Z"
    assert entry["software"] == {"torch": "2.11"} and entry["tolerance"] == 0.1
    assert "graphed" not in entry and "budget" not in entry  # graphed=False is the default; budget is a report field
    assert doc["metrics"]["t.py::m::compile_s"]["value"] == 8.0


def test_an_entry_moves_only_beyond_a_third_of_its_tolerance_or_when_its_method_changes() -> None:
    doc, _ = blessed(None, [result("t.py::a", 2.0), result("t.py::b", 2.0), result("t.py::c", 2.0)])
    small = 2.0 * (1 + 0.1 * REWRITE_SHARE_OF_TOLERANCE * 0.9)
    large = 2.0 * (1 + 0.1 * REWRITE_SHARE_OF_TOLERANCE * 1.1)
    doc2, actions = blessed(doc, [result("t.py::a", small), result("t.py::b", large),
                                  result("t.py::c", 2.0, graphed=True)])
    assert actions == {"t.py::a": "kept", "t.py::b": "updated", "t.py::c": "updated"}
    assert doc2["cases"]["t.py::a"]["speedup"] == 2.0
    assert doc2["cases"]["t.py::b"]["speedup"] == round(large, 3)


def test_results_cross_json_typed() -> None:
    r = result("t.py::a", 2.0, flops=1e12, budget={"seconds": 1.0, "timed_s": 0.8, "stats_s": 0.05, "other_s": 0.15})
    wire = json.loads(json.dumps(r.to_json()))
    assert wire["verdict"] == "pass" and wire["achieved_tflops"] == pytest.approx(1e12 / 1e-3 / 1e12)
    back = CompareResult.from_json(wire)
    assert back == r and back.verdict is Verdict.PASS
    m = metric("t.py::m::x", 3.0)
    assert MetricResult.from_json(json.loads(json.dumps(m.to_json()))) == m
    assert case_entry(r, {}, "now")["flops"] == 1e12


def test_one_severity_order() -> None:
    rs = [result("p", 1.0), result("r", 1.0, verdict=Verdict.REGRESSED), result("n", 1.0, verdict=Verdict.NEW),
          result("i", 1.0, verdict=Verdict.IMPROVED), result("p2", 1.0)]
    assert [r.case_id for r in by_severity(rs)] == ["r", "i", "n", "p", "p2"]


def test_policy_from_settings_reaches_the_ranks_as_json() -> None:
    policy = Policy.from_settings(SimpleNamespace(budget_s=0.5, target_noise=0.02))
    assert (policy.budget_s, policy.target_rel_halfwidth) == (0.5, 0.02)
    assert Policy.from_json(json.loads(json.dumps(policy.to_json()))) == policy
    with pytest.raises(ValueError, match="unknown measurement policy fields: budget"):
        Policy.from_json({"budget": 1.0})
