"""speedgate's own hooks, for a project's conftest.py or another plugin (registered through pytest_addhooks): a report
of its own, the clock comparisons are timed with, and an audit of every measured comparison (docs/hooks.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .integrity import Evidence
    from .reporting import Report
    from .timers import Timer, TimerKind


@pytest.hookspec(historic=True)
def pytest_speedgate_reports() -> Sequence[Report] | None:
    """Kinds of report file of the project's, each a speedgate.reporting.Report: its name, its writer (a class with
    path(run, asked) and write(run, path): speedgate.reporting.Reporter), its option with help and metavar, and the
    optional package it needs. Called for each plugin and conftest.py as it is registered, before the command line is
    parsed (its options join speedgate's group then); the reports are written after speedgate's own, in order."""


@pytest.hookspec(firstresult=True)
def pytest_speedgate_make_timer(config: pytest.Config, kind: TimerKind) -> Timer | None:
    """The clock this process times every comparison with, made once, when a test first times one (a test's own
    `speedgate_timer` fixture still overrides it). kind: --speedgate-timer's (AUTO, CPU or CUDA). The first
    implementation to return a clock wins (a speedgate.timers.Timer, or anything with first_call, time_each and
    describe); speedgate's own comes last and makes CUDA events or the host clock."""


@pytest.hookspec(firstresult=True)
def pytest_speedgate_audit(evidence: Evidence) -> str | None:
    """A project's audit of a measured comparison (speedgate.integrity.Evidence: the case id, the optimized side's
    median, the profiled calls, the roofline floor, the declared work), run after speedgate's own audits pass: why
    the result cannot be believed (the case fails, and is never blessed), or None. The first reason returned wins."""
