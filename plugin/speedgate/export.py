"""The run as files for other tools: speedgate's JSON report, pytest-benchmark's JSON layout, JUnit properties (each
test's, and the suite's)."""

from __future__ import annotations

import json
import platform
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from .reporting import ReportError, RunView, dump_json, write_text
from .results import CompareResult, MetricResult

REPORT_VERSION = 1
JUNIT_FIELDS = ("speedup", "reference_ms", "optimized_ms", "ci_low", "ci_high", "baseline", "change", "peak_fraction",
                "verdict")
GATE_FIELDS = ("case_id", "speedup", "ci_low", "ci_high", "noise", "baseline", "change", "tolerance", "verdict",
               "peak_fraction", "achieved_tflops", "achieved_gbps", "config")


def json_report(
    records: Sequence[CompareResult], metrics: Sequence[MetricResult], failed_nodeids: Collection[str], *,
    settings: Mapping[str, Any], fingerprints: Mapping[str, Any], ceilings: Mapping[str, Any],
    gpu_state: Mapping[str, str], workers: Mapping[str, Any],
) -> dict[str, Any]:
    """speedgate's own report (--speedgate-json): every case and metric with its test's outcome."""
    return {
        "speedgate_report_version": REPORT_VERSION,
        "settings": dict(settings),
        "fingerprints": dict(fingerprints),
        "ceilings": dict(ceilings),
        "gpu_state_at_start": dict(gpu_state),
        "workers": dict(workers),
        "cases": [dict(r.to_json(), test_failed=r.nodeid in failed_nodeids) for r in records],
        "metrics": [dict(m.to_json(), test_failed=m.nodeid in failed_nodeids) for m in metrics],
    }


def junit_properties(results: Sequence[CompareResult]) -> list[tuple[str, Any]]:
    """('speedgate.<pair>.<field>', value) for each result of a test; <pair> is its name=, or 'case'. JUnit
    testcase properties: the xunit1 family only (xunit2's schema has none)."""
    props = []
    for result in results:
        record = result.to_json()
        for name in JUNIT_FIELDS:
            value = record.get(name)
            if value is not None:
                props.append((f"speedgate.{result.name or 'case'}.{name}", value))
    return props


def junit_suite_properties(results: Sequence[CompareResult]) -> list[tuple[str, Any]]:
    """The run once, for the JUnit test suite: its hardware keys, how many cases, and how many of each verdict
    ('speedgate.regressed': 1). What xunit2 allows, where a test case has no properties."""
    tally: dict[str, int] = {}
    for result in results:
        tally[result.verdict.value] = tally.get(result.verdict.value, 0) + 1
    keys = ", ".join(sorted({r.hardware_key for r in results}))
    return [("speedgate.hardware_key", keys), ("speedgate.cases", len(results)),
            *((f"speedgate.{verdict}", count) for verdict, count in sorted(tally.items()))]


def junit_per_test(config: Any) -> bool:
    """Whether each result becomes a property of its test: pytest's xunit2 schema (its default family) has no
    testcase properties, xunit1 and legacy do (pytest's record_property follows the same rule)."""
    try:
        return config.getini("junit_family") != "xunit2"
    except ValueError:  # junitxml disabled (-p no:junitxml): the properties are only report data
        return True


def add_junit_properties(item: Any, results: Sequence[CompareResult]) -> None:
    """A test's results as its properties (they travel under xdist as report data), where its family has them."""
    if junit_per_test(item.config):
        item.user_properties.extend(junit_properties(results))


def add_junit_suite_properties(config: Any, records: Sequence[CompareResult]) -> None:
    """The run's hardware key and verdict tally as properties of the JUnit test suite (valid in every family), as
    pytest's record_testsuite_property adds them; only on the controller, which alone writes the file."""
    from _pytest.junitxml import xml_key  # the key record_testsuite_property reads; pytest has no public one

    xml = config.stash.get(xml_key, None)
    if xml is None or not records:
        return
    for name, value in junit_suite_properties(records):
        xml.add_global_property(name, value)


def benchmark_machine_info() -> dict[str, Any]:
    return {"node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
            "python_implementation": platform.python_implementation(), "python_version": platform.python_version(),
            "system": platform.system(), "release": platform.release()}


def benchmark_json(records: Sequence[CompareResult], fingerprints: Mapping[str, Any], machine_info: Mapping[str, Any],
                   commit_info: Mapping[str, Any], version: str, now: str) -> dict[str, Any]:
    """pytest-benchmark's JSON layout: two benchmarks per timed case (reference, optimized) in one group.

    Each benchmark's extra_info carries the gate's fields, so tools that read pytest-benchmark files see the
    speedup and verdict beside the times.
    """
    benchmarks = []
    for result in records:
        record = result.to_json()
        if not result.timed or not result.reference_stats:
            continue
        gate = {k: record.get(k) for k in GATE_FIELDS}
        for side in ("reference", "optimized"):
            benchmarks.append({
                "group": result.case_id,
                "name": f"{result.case_id.rpartition('/')[2]}[{side}]",
                "fullname": f"{result.case_id}[{side}]",
                "params": {"side": side},
                "param": side,
                "extra_info": {**gate, "side": side, "first_call_ms": record.get(f"{side}_first_ms")},
                "options": {"timer": result.timer, "speedgate": True},
                "stats": record[f"{side}_stats"],
            })
    return {
        "machine_info": {**machine_info, "speedgate_fingerprints": dict(fingerprints)},
        "commit_info": dict(commit_info),
        "benchmarks": benchmarks,
        "datetime": now,
        "version": version,
    }


def pytest_benchmark_report(records: Sequence[CompareResult], fingerprints: Mapping[str, Any], now: str) -> dict[str, Any]:
    """benchmark_json with pytest-benchmark's own machine and commit info; it is an optional extra."""
    try:
        from pytest_benchmark import __version__ as benchmark_version
        from pytest_benchmark.utils import get_commit_info
    except ImportError:
        raise ReportError(
            "--speedgate-benchmark-json needs pytest-benchmark: pip install 'pytest-speedgate[benchmark]'"
        ) from None
    return benchmark_json(records, fingerprints, benchmark_machine_info(), get_commit_info(), benchmark_version, now)


class JsonReport:
    """--speedgate-json: speedgate's own report, every case and metric (written even when no test used perf)."""

    def path(self, run: RunView, asked: Path | None) -> Path | None:
        return asked

    def write(self, run: RunView, path: Path) -> None:
        s = run.settings
        settings = {"tolerance": s.tolerance, "strict": s.strict,
                    "default_tolerance": {key: s.default_tolerance(key) for key in run.result_keys},
                    "update_baselines": s.update_baselines, "correctness_only": s.correctness_only,
                    "baseline_dir": str(s.baseline_dir)}
        doc = json_report(run.records, run.metrics, run.failed_nodeids, settings=settings,
                          fingerprints=run.fingerprints, ceilings=run.ceilings, gpu_state=run.gpu_state,
                          workers=run.workers)
        if run.unmatched is not None:
            doc["unmatched_baseline_entries"] = dict(run.unmatched)
        doc["run_time"] = run.now
        doc["test_seconds"] = {nodeid: round(seconds, 3) for nodeid, seconds in sorted(run.test_seconds.items())}
        # Every test's, perf or not, by test id: what `python -m speedgate schedule` records from a report.
        doc["durations"] = {test: round(seconds, 3) for test, seconds in sorted(run.durations.items())}
        # Every failed test that used perf, with or without a record: one that raised before a comparison was judged
        # (an audit's accusation, an exception) has no case to carry test_failed.
        doc["failed_tests"] = sorted(run.failed_nodeids)
        doc["failure_causes"] = {nodeid: run.failure_causes[nodeid] for nodeid in doc["failed_tests"]
                                 if nodeid in run.failure_causes}
        write_text(path, dump_json(doc))


class BenchmarkReport:
    """--speedgate-benchmark-json: the timed cases in pytest-benchmark's JSON layout."""

    def path(self, run: RunView, asked: Path | None) -> Path | None:
        return asked

    def write(self, run: RunView, path: Path) -> None:
        doc = pytest_benchmark_report(run.records, run.fingerprints, run.now)
        write_text(path, json.dumps(doc, indent=2) + "\n")
