"""The run ledger: the results and metrics a run recorded, the tests' outcomes, the fingerprints they were measured
under, and where each was asked for; what an xdist worker sends the controller (WorkerReport, one typed record); and
the run closed at its end (speedgate.ending.RunEnd)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .ending import RunEnd

if TYPE_CHECKING:
    from .bench import Bench
    from .book import BaselineBook
    from .case_ids import CaseIds
    from .options import Settings
    from .results import CompareResult, MetricResult

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def callers_outside_speedgate(depth: int = 30) -> list[tuple[str, int, int]]:
    """(file, first line of the function, line) of the frames outside this package, innermost first: where a test (or
    a helper it called) asked for perf.compare or perf.metric."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back  # type: ignore[assignment]
    sites: list[tuple[str, int, int]] = []
    while frame is not None and len(sites) < depth:
        sites.append((frame.f_code.co_filename, frame.f_code.co_firstlineno, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
    return sites


@dataclass(frozen=True)
class WorkerReport:
    """What an xdist worker sends the controller at its end (and what its deadline or a CUDA fault saves before it
    dies): one record, every field required, plain builtins only (it crosses xdist's channel as JSON). Both ends run
    the same code, so a field one end lacks is an error, never a default."""

    records: list[dict[str, Any]]  # CompareResult.to_json() of each
    metrics: list[dict[str, Any]]  # MetricResult.to_json() of each
    failed: list[str]  # node ids of the tests using perf that failed a phase
    failure_causes: dict[str, str]  # node id -> what failed it first (pytest's one-line crash message)
    passed: list[str]  # ... that finished and passed (call and teardown)
    passed_cases: list[str]  # their case ids (the controller collects nothing, so cannot name them)
    fingerprints: dict[str, dict[str, Any]]  # hardware key -> the fingerprint its results were measured under
    ceilings: dict[str, dict[str, Any]]  # hardware key -> the ceilings measured on it
    gpu_state: dict[str, str]  # hardware key -> the GPU's state when timing began
    collected_cases: list[str]  # what collection found: the case ids of the tests using perf,
    collected_files: list[str]  # the test files that yielded tests,
    anchors: list[str]  # the folders the case ids are relative to,
    unmarked_anchors: list[str]  # and those only the run's arguments anchored
    entries_read: dict[str, list[str]]  # hardware key -> the entries its file held when this worker read it
    cpu_contention: dict[str, Any] | None  # the host clock's contention counts (None: it timed nothing with it)
    worker: dict[str, Any] | None  # {"id", "device", "shared", "pinned"}; None when no test asked for a device

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerReport:
        """The report a worker sent; TypeError naming the field when one is missing or unknown."""
        return cls(**json.loads(text))


CAUSE_CHARS = 300  # a failure's cause as the JSON report keeps it: its crash message's first line, cut to this


def failure_cause(rep: Any) -> str | None:
    """What failed a test's phase, from its pytest report: the crash message's first line ("ZeroDivisionError:
    division by zero"), else the long report's last line; None where the report says nothing."""
    crash = getattr(getattr(rep, "longrepr", None), "reprcrash", None)
    text = str(getattr(crash, "message", "") or "")
    if not text and getattr(rep, "longrepr", None) is not None:
        lines = str(rep.longrepr).strip().splitlines()
        text = lines[-1] if lines else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return (first[:CAUSE_CHARS - 3] + "...") if len(first) > CAUSE_CHARS else (first or None)


class RunLedger:
    """What a run produced: typed results and metrics, the tests' outcomes and durations, the fingerprint each
    hardware key's results were measured under, where each result was asked for; merged across xdist workers."""

    def __init__(self) -> None:
        self.records: list[CompareResult] = []
        self.metric_records: list[MetricResult] = []
        self.failed_nodeids: set[str] = set()
        self.failure_causes: dict[str, str] = {}  # failed node id -> its first failed phase's crash message
        self.passed_nodeids: set[str] = set()  # finished: their call passed and their teardown ran to the end
        self._passed_cases_absorbed: set[str] = set()  # workers' passed tests, as case ids
        self._call_passed: set[str] = set()  # tests whose call passed, their teardown not yet reported
        self.lost_workers: list[str] = []  # xdist workers that ended without their closing report
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.call_sites: dict[str, list[tuple[str, int, int]]] = {}  # case or metric id -> where it was asked for
        self.progress: Callable[[str], None] | None = None  # told each result's id as it is recorded (the deadline)
        self.used = False

    def record(self, result: CompareResult, fingerprint: dict[str, Any]) -> None:
        """A comparison's result, measured under fingerprint (its hardware key's)."""
        self.records.append(result)
        self._noted(result.case_id, result.hardware_key, fingerprint)

    def record_metric(self, result: MetricResult, fingerprint: dict[str, Any]) -> None:
        self.metric_records.append(result)
        self._noted(result.metric_id, result.hardware_key, fingerprint)

    def _noted(self, result_id: str, key: str, fingerprint: dict[str, Any]) -> None:
        self.used = True
        self.fingerprints[key] = fingerprint
        self.call_sites[result_id] = callers_outside_speedgate()
        if self.progress is not None:
            self.progress(result_id)

    def note_outcome(self, nodeid: str, when: str, passed: bool, failed: bool, cause: str | None = None) -> None:
        """A phase's outcome of a test that used perf; cause: what failed it (kept for its first failed phase)."""
        if when == "call" and passed:
            self._call_passed.add(nodeid)
        if when == "teardown" and passed and nodeid in self._call_passed:
            self.passed_nodeids.add(nodeid)  # finished: its call passed and its teardown ran to the end
        if failed:
            self.failed_nodeids.add(nodeid)
            if cause:
                self.failure_causes.setdefault(nodeid, cause)

    def finished_and_passed(self, nodeid: str) -> bool:
        return nodeid in self.passed_nodeids and nodeid not in self.failed_nodeids

    def passed_case_ids(self, case_bases: Mapping[str, str]) -> set[str]:
        """The case ids of the tests using perf that finished and passed (a worker's, merged on the controller)."""
        mine = {case_bases.get(n, n) for n in self.passed_nodeids - self.failed_nodeids}
        return mine | self._passed_cases_absorbed

    def absorb(self, report: WorkerReport) -> None:
        """An xdist worker's results, outcomes and fingerprints (the fuller view of a hardware key's, whichever
        worker saw it)."""
        from .results import CompareResult, MetricResult

        self.records.extend(CompareResult.from_json(r) for r in report.records)
        self.metric_records.extend(MetricResult.from_json(m) for m in report.metrics)
        self.failed_nodeids.update(report.failed)
        for nodeid, cause in report.failure_causes.items():
            self.failure_causes.setdefault(nodeid, cause)
        self.passed_nodeids.update(report.passed)
        self._passed_cases_absorbed.update(report.passed_cases)
        for key, fp in report.fingerprints.items():
            known = self.fingerprints.get(key)
            if known is None or len(fp["hardware"]) > len(known["hardware"]):
                self.fingerprints[key] = fp
        self.used = self.used or bool(report.records) or bool(report.metrics)

    def closing(self, settings: Settings, interrupted: bool, *, ids: CaseIds, book: BaselineBook,
                bench: Bench, seconds: Mapping[str, float] | None = None,
                test_id: Callable[[str], str] = str) -> RunEnd:
        """The run at its end, for the end's stages (on the controller: every worker absorbed). seconds: every
        finished test's seconds by node id, with perf or without (the plugin's one count, as the process that ends
        the run saw the reports); test_id: a node id's test id (the baseline files' form of it)."""
        seconds = dict(seconds or {})
        used_perf = self.passed_nodeids | self.failed_nodeids  # every test using perf that reached its teardown
        return RunEnd(
            settings=settings, interrupted=interrupted, used=self.used, records=tuple(self.records),
            metric_records=tuple(self.metric_records), failed_nodeids=frozenset(self.failed_nodeids),
            failure_causes=dict(self.failure_causes),
            finished=frozenset(self.passed_nodeids - self.failed_nodeids),
            passed_cases=frozenset(self.passed_case_ids(ids.case_bases)),
            test_seconds={nodeid: s for nodeid, s in seconds.items() if nodeid in used_perf},
            lost_workers=tuple(self.lost_workers), fingerprints=dict(self.fingerprints),
            ceilings_seen=dict(bench.ceilings_seen), gpu_state_at_start=dict(bench.gpu_state_at_start),
            workers=dict(bench.workers), contention=bench.contention_warning(self.records), ids=ids, book=book,
            bench=bench, durations={test_id(nodeid): s for nodeid, s in seconds.items()},
        )


__all__ = ["RunLedger", "WorkerReport", "callers_outside_speedgate"]
