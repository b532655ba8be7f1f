"""The files a run writes at its end, behind one interface: each Reporter says where its file goes (None: not asked
for) and writes it from the RunView. A new report is one module with one Reporter class, named in REPORTERS."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .results import CompareResult, MetricResult

# "module:Class" of every reporter, in the order they write (relative to this package).
REPORTERS = (
    "export:JsonReport",
    "export:BenchmarkReport",
    "chart:ChartReport",
    "report:MarkdownReport",
    "report:StepSummary",
)


class ReportError(Exception):
    """A report that could not be made (a missing optional package, an unwritable path); the message says which."""


@dataclass(frozen=True)
class RunView:
    """What the reporters read of a finished run (on the xdist controller: every worker's results merged)."""

    records: Sequence[CompareResult]
    metrics: Sequence[MetricResult]
    failed_nodeids: set[str]
    settings: Any
    result_keys: Sequence[str]
    fingerprints: Mapping[str, Any] = field(default_factory=dict)
    ceilings: Mapping[str, Any] = field(default_factory=dict)
    gpu_state: Mapping[str, str] = field(default_factory=dict)
    workers: Mapping[str, Any] = field(default_factory=dict)
    header: Sequence[str] = ()
    warnings: Sequence[str] = ()
    errors: Sequence[str] = ()
    unmatched: Mapping[str, Any] | None = None
    now: str = ""
    test_seconds: Mapping[str, float] = field(default_factory=dict)  # node id -> its pytest durations

    @property
    def has_results(self) -> bool:
        return bool(self.records or self.metrics)


class Reporter(Protocol):
    """One kind of report file."""

    name: str

    def path(self, run: RunView) -> Path | None:
        """Where this report goes, or None when the run did not ask for it (or it has nothing to say)."""

    def write(self, run: RunView, path: Path) -> None:
        """Write the report; ReportError with a message for the user when it cannot be made."""


def reporters() -> list[Reporter]:
    """An instance of every reporter in REPORTERS."""
    found: list[Reporter] = []
    for spec in REPORTERS:
        module, _, name = spec.partition(":")
        found.append(getattr(importlib.import_module(f".{module}", __package__), name)())
    return found


def write_all(run: RunView) -> list[str]:
    """Every report the run asked for; the errors of those that could not be made."""
    errors = []
    for reporter in reporters():
        path = reporter.path(run)
        if path is None:
            continue
        try:
            reporter.write(run, path)
        except ReportError as exc:
            errors.append(str(exc))
    return errors


def write_text(path: Path, text: str, *, append: bool = False) -> None:
    """Write (or append) text, making the folder; ReportError naming the path when it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise ReportError(f"{path}: could not be written: {exc}") from None


def dump_json(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
