"""One pytest run's speedgate, as the hooks hold it: a small facade over its four owners (case ids, the baseline book,
the bench, the run ledger), what an xdist worker sends and the controller absorbs, and the run at its end."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .bench import Bench
from .book import BaselineBook
from .case_ids import CaseIds
from .ledger import RunEnd, RunLedger, WorkerReport, failure_cause

if TYPE_CHECKING:
    from .devices import Assignment
    from .integrity import Evidence
    from .options import Settings
    from .results import CompareResult, MetricResult
    from .timers import Timer, TimerKind


class SpeedgateSession:
    """One run: its settings and four owners. case_ids: what collection found, each test's case id. book: the
    baseline files. bench: the machine, the timer, the GPU, the device's turn. ledger: what the run produced.
    make_timer and audit are the project's hooks (pytest_speedgate_make_timer, pytest_speedgate_audit), where a
    conftest may add its own; None: speedgate's own timer, no audit of the project's."""

    def __init__(self, settings: Settings, assignment: Assignment | None = None, *,
                 make_timer: Callable[[TimerKind], Timer] | None = None,
                 audit: Callable[[Evidence], str | None] | None = None) -> None:
        self.settings = settings
        self.case_ids = CaseIds()
        self.book = BaselineBook(settings.baseline_dir)
        self.bench = Bench(settings.hardware_key, settings.timer, assignment, make_timer)
        self.ledger = RunLedger()
        self._audit = audit

    def audit(self, evidence: Evidence) -> str | None:
        """The project's own audit of a measured comparison (after speedgate's): why it cannot be believed, or None."""
        return None if self._audit is None else self._audit(evidence)

    def record(self, result: CompareResult) -> None:
        self.ledger.record(result, self.bench.fingerprint_of(result.hardware_key))

    def record_metric(self, result: MetricResult) -> None:
        self.ledger.record_metric(result, self.bench.fingerprint_of(result.hardware_key))

    def note_outcome(self, nodeid: str, rep: Any, perf: Any, project_root: Path) -> Path | None:
        """Record a phase's outcome of a test that used perf; keep its artifacts when it failed and they were asked
        for (returns where)."""
        self.ledger.note_outcome(nodeid, rep.when, bool(rep.passed), bool(rep.failed), failure_cause(rep))
        if not rep.failed or self.settings.artifacts_dir is None:
            return None
        from . import artifacts

        return artifacts.write(self.settings.artifacts_dir, nodeid, [r.to_json() for r in perf.results], perf.samples,
                               str(rep.longrepr), project_root)

    @property
    def touched(self) -> bool:
        """Whether the run has anything to say: results, workers whose results were lost, or (blessing) tests using
        perf that failed before they measured anything, which the bless must name as not blessed."""
        return (self.ledger.used or bool(self.ledger.lost_workers)
                or (self.settings.update_baselines and bool(self.ledger.failed_nodeids)))

    def closing(self, interrupted: bool = False, seconds: Mapping[str, float] | None = None,
                test_id: Callable[[str], str] = str) -> RunEnd:
        """The run at its end (on the controller: every worker absorbed), for speedgate.finish; seconds: every
        finished test's seconds by node id; test_id: a node id's test id (RunLedger.closing)."""
        return self.ledger.closing(self.settings, interrupted, ids=self.case_ids, book=self.book, bench=self.bench,
                                   seconds=seconds, test_id=test_id)

    # -- the run so far, read-only (history.recording reads the run by these names) --------------------------------
    records = property(lambda self: self.ledger.records)
    metric_records = property(lambda self: self.ledger.metric_records)
    failed_nodeids = property(lambda self: self.ledger.failed_nodeids)
    fingerprints = property(lambda self: self.ledger.fingerprints)
    ceilings_seen = property(lambda self: self.bench.ceilings_seen)
    gpu_state_at_start = property(lambda self: self.bench.gpu_state_at_start)
    workers = property(lambda self: self.bench.workers)

    # -- xdist ---------------------------------------------------------------------------------------------------
    def worker_payload(self) -> str:
        """What this xdist worker sends the controller: one WorkerReport, each owner's part."""
        ledger, ids = self.ledger, self.case_ids
        return WorkerReport(
            records=[r.to_json() for r in ledger.records], metrics=[m.to_json() for m in ledger.metric_records],
            failed=sorted(ledger.failed_nodeids), failure_causes=dict(ledger.failure_causes),
            passed=sorted(ledger.passed_nodeids),
            passed_cases=sorted(ledger.passed_case_ids(ids.case_bases)),
            fingerprints=ledger.fingerprints, ceilings=self.bench.ceilings_seen, gpu_state=self.bench.gpu_state_at_start,
            collected_cases=sorted(ids.collected_cases), collected_files=sorted(ids.collected_files),
            anchors=sorted(ids.anchors), unmarked_anchors=sorted(ids.unmarked_anchors),
            entries_read={key: sorted(entries) for key, entries in self.book.entries_read.items()},
            cpu_contention=self.bench.own_contention(), worker=self.bench.worker_device(),
        ).to_json()

    def absorb(self, payload: str) -> None:
        """A worker's report, each owner taking its part."""
        report = WorkerReport.from_json(payload)
        self.ledger.absorb(report)
        self.case_ids.absorb(report.collected_cases, report.collected_files, report.anchors, report.unmarked_anchors)
        self.book.absorb(report.entries_read)
        self.bench.absorb(report.ceilings, report.gpu_state, report.cpu_contention, report.worker)


__all__ = ["SpeedgateSession"]
