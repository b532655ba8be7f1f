"""The run at its end (RunEnd: the one snapshot the end's stages read, speedgate.finish) and what its end did (Finish:
the summary's header, lines, warnings and errors, which the stages add to)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .reporting import RunView

if TYPE_CHECKING:
    from .bench import Bench
    from .book import BaselineBook
    from .case_ids import CaseIds
    from .options import Settings
    from .results import CompareResult, MetricResult


@dataclass(frozen=True)
class RunEnd:
    """The run at its end: every result, outcome and fingerprint, what the bench saw, and the baseline book (the one
    owner the stages still ask: blessing rewrites its documents, the checks after it read them). This machine's
    hardware key and fingerprint are looked up only when a stage needs them (bench), as before the snapshot."""

    settings: Settings
    interrupted: bool
    used: bool  # a test asked for perf (here, or in an xdist worker)
    records: Sequence[CompareResult]
    metric_records: Sequence[MetricResult]
    failed_nodeids: frozenset[str]
    failure_causes: Mapping[str, str]  # failed node id -> what failed it first (pytest's crash message)
    finished: frozenset[str]  # node ids of the tests that finished and passed
    passed_cases: frozenset[str]  # their case ids
    test_seconds: Mapping[str, float]  # node id -> the seconds of a test that used perf (durations, by node id)
    lost_workers: Sequence[str]
    fingerprints: Mapping[str, dict[str, Any]]
    ceilings_seen: Mapping[str, dict[str, Any]]
    gpu_state_at_start: Mapping[str, str]
    workers: Mapping[str, dict[str, Any]]
    contention: str | None  # the warning when the host clock's timing was contended
    ids: CaseIds
    book: BaselineBook
    bench: Bench
    durations: Mapping[str, float] = field(default_factory=dict)  # test id -> every test's seconds, perf or not

    @cached_property
    def result_keys(self) -> list[str]:
        """The hardware keys this run has results for (this machine's when it has none)."""
        keys = {r.hardware_key for r in self.records} | {m.hardware_key for m in self.metric_records}
        return sorted(keys) or [self.bench.hardware_key]

    def fingerprint_for(self, key: str) -> dict[str, Any]:
        """The fingerprint key's results were measured under (this machine's when none was recorded)."""
        return self.fingerprints.get(key) or self.bench.fingerprint.to_json()


@dataclass
class Finish:
    """What the end of the run did: the summary's header, blessing's lines, and errors (each fails the run)."""

    run: RunEnd
    header: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown loudly, but the run may pass
    alerts: list[str] = field(default_factory=list)  # shown first, loudly: what the run could not gate
    unmatched: dict[str, Any] | None = None  # this hardware's baseline entries no collected test matched

    def view(self, now: str) -> RunView:
        """What the reports read: the run, and what its end said so far."""
        run = self.run
        return RunView(
            records=run.records, metrics=run.metric_records, failed_nodeids=run.failed_nodeids, settings=run.settings,
            result_keys=run.result_keys, fingerprints=run.fingerprints, ceilings=run.ceilings_seen,
            gpu_state=run.gpu_state_at_start, workers=run.workers, header=self.header,
            warnings=[*self.alerts, *self.warnings], errors=list(self.errors), unmatched=self.unmatched, now=now,
            test_seconds=dict(run.test_seconds), failure_causes=dict(run.failure_causes),
            durations=dict(run.durations),
        )


__all__ = ["Finish", "RunEnd"]
