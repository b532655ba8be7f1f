"""The files a run writes at its end, behind one interface. Each kind is registered as a Report (its option, the
optional package it needs, its writer); its file is found from its option when the run is configured, and its writer,
a Reporter, reads the RunView. A new report is one module with its writer and one registration: speedgate's own in
BUILT_IN, a project's returned from its conftest's pytest_speedgate_reports (docs/hooks.md)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the results only for annotations: this module is read when pytest starts, to add the options
    from .results import CompareResult, MetricResult

# Each text ends with its default (the README's options table is generated from them); never a '%' (argparse).
HELP_JSON = "write every case's measurement and verdict to this JSON file (default: not written)"
HELP_MARKDOWN = (
    "write the summary table as Markdown to this file "
    "(default: not written; the table is appended to $GITHUB_STEP_SUMMARY whenever that is set)"
)
HELP_BENCHMARK_JSON = (
    "write timed cases in pytest-benchmark's JSON layout, readable by `pytest-benchmark compare` (default: not written)"
)
HELP_CHART = (
    "draw the run as a PNG (needs matplotlib): speedup against baseline with tolerance bands, and percent of peak "
    "(default: not drawn)"
)


class ReportError(Exception):
    """A report that could not be made (a missing optional package, an unwritable path); the message says which."""


class ReportSettingsError(ValueError):
    """A report asked for whose optional package is not installed; the message names the option and how to install it."""


@dataclass(frozen=True)
class RunView:
    """What the reporters read of a finished run (on the xdist controller: every worker's results merged)."""

    records: Sequence[CompareResult]
    metrics: Sequence[MetricResult]
    failed_nodeids: Collection[str]
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
    failure_causes: Mapping[str, str] = field(default_factory=dict)  # failed node id -> what failed it first
    durations: Mapping[str, float] = field(default_factory=dict)  # test id -> every test's seconds, perf or not

    @property
    def has_results(self) -> bool:
        return bool(self.records or self.metrics)


class Reporter(Protocol):
    """One kind of report file's writer."""

    def path(self, run: RunView, asked: Path | None) -> Path | None:
        """Where this report goes (asked: its option's path, None when the option was not given), or None: not
        written in this run (not asked for, or nothing to say)."""

    def write(self, run: RunView, path: Path) -> None:
        """Write the report; ReportError with a message for the user when it cannot be made."""


@dataclass(frozen=True)
class Report:
    """One kind of report file, as registered. writer: the Reporter's class (a project's), or "module:Class" of
    speedgate's own (imported only when a run writes one). option: the command-line option that names the file
    (--speedgate-json PATH), with its help (ending with its default) and metavar; None when the writer finds its
    path itself. needs: the module the writer imports, and install: how to install it, checked when the run is
    configured."""

    name: str
    writer: str | Callable[[], Reporter]
    option: str | None = None
    help: str = ""
    metavar: str = "PATH"
    needs: str | None = None
    install: str = ""

    @property
    def dest(self) -> str:
        return (self.option or self.name).lstrip("-").replace("-", "_")

    def reporter(self) -> Reporter:
        if callable(self.writer):
            return self.writer()
        module, _, name = self.writer.partition(":")
        made: Reporter = getattr(importlib.import_module(f".{module}", __package__), name)()
        return made


BUILT_IN = (
    Report("json", "export:JsonReport", "--speedgate-json", HELP_JSON),
    Report("markdown", "report:MarkdownReport", "--speedgate-markdown", HELP_MARKDOWN),
    Report("benchmark-json", "export:BenchmarkReport", "--speedgate-benchmark-json", HELP_BENCHMARK_JSON,
           needs="pytest_benchmark", install="pip install 'pytest-speedgate[benchmark]'"),
    Report("chart", "chart:ChartReport", "--speedgate-chart", HELP_CHART, needs="matplotlib",
           install="pip install 'pytest-speedgate[chart]'"),
    Report("github-step-summary", "report:StepSummary"),
)


def installed(module: str) -> bool:
    """Whether module can be imported, without importing it (matplotlib takes a while)."""
    if module in sys.modules:
        return sys.modules[module] is not None  # None: blocked on purpose
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class ReportRegistry:
    """The kinds of report a run knows, in the order they are written: speedgate's own, then those plugins and
    conftests register. Each one's option joins speedgate's option group as it is registered (add)."""

    def __init__(self, group: Any) -> None:
        self._group = group  # pytest's OptionGroup "speedgate"
        self.known: list[Report] = []

    def add(self, reports: Iterable[Report]) -> None:
        for report in reports:
            if report.option is not None:
                self._group.addoption(report.option, dest=report.dest, default=None, metavar=report.metavar,
                                      help=report.help)
            self.known.append(report)

    def asked(self, getoption: Callable[[str], Any]) -> Reports:
        """The reports with the file each option named (made absolute from the working folder), when the run is
        configured; ReportSettingsError when one asked for lacks its package: found now, not after the whole suite."""
        chosen = []
        for report in self.known:
            value = getoption(report.dest) if report.option is not None else None
            path = Path(str(value)).absolute() if value else None
            if path is not None and report.needs is not None and not installed(report.needs):
                raise ReportSettingsError(f"{report.option} needs {report.needs}, which is not installed here: "
                                          f"{report.install}")
            chosen.append((report, path))
        return Reports(tuple(chosen))


@dataclass(frozen=True)
class Reports:
    """A run's reports: each kind with the file its option named (None: not given)."""

    chosen: tuple[tuple[Report, Path | None], ...]

    @property
    def files_asked(self) -> bool:
        """Whether a report file was asked for: it is written (empty) even when no test used perf."""
        return any(path is not None for _, path in self.chosen)

    def write_all(self, run: RunView) -> list[str]:
        """Every report the run asked for; the errors of those that could not be made."""
        errors = []
        for report, asked in self.chosen:
            reporter = report.reporter()
            path = reporter.path(run, asked)
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
