"""pytest hooks for speedgate. Thin: each forwards to options, SpeedgateSession or report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Generator

import pytest

from . import artifacts, report
from .baseline import BaselineError
from .devices import Assignment, pin_worker
from .fixture import Perf, SpeedRegression
from .options import SettingsError, add_options, read_settings
from .session import SpeedgateSession

SESSION_KEY = pytest.StashKey[SpeedgateSession]()
PERF_KEY = pytest.StashKey[Perf]()
ASSIGNMENT_KEY = pytest.StashKey["Assignment | None"]()
def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


FINISH_KEY = pytest.StashKey[list]()
ERRORS_KEY = pytest.StashKey[list]()
WORKER_OUTPUT = "speedgate"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before any conftest can start CUDA: give this xdist worker its own GPU.
    early_config.stash[ASSIGNMENT_KEY] = pin_worker()


def pytest_configure(config: pytest.Config) -> None:
    try:
        settings = read_settings(config)
    except SettingsError as exc:
        raise pytest.UsageError(f"speedgate: {exc}") from None
    config.stash[SESSION_KEY] = SpeedgateSession(settings, config.stash.get(ASSIGNMENT_KEY, None))
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config), "speedgate-xdist")


def _session(config: pytest.Config) -> SpeedgateSession:
    return config.stash[SESSION_KEY]


def pytest_collection_finish(session: pytest.Session) -> None:
    # Fail fast, before any test runs, when the suite uses the gate and its baseline file is unusable.
    if not any("perf" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    state = _session(session.config)
    try:
        state.load_baseline()
    except BaselineError as exc:
        raise pytest.UsageError(f"speedgate: {exc}; the file was left untouched") from None


@pytest.fixture
def speedgate_timer() -> Any:
    """The clock perf.compare uses; None means the session's (--speedgate-timer). Override to inject one."""
    return None


@pytest.fixture
def perf(request: pytest.FixtureRequest, speedgate_timer: Any) -> Perf:
    """Compare an optimized callable with its reference: perf.assert_close(...), perf.compare(...)."""
    state = _session(request.config)
    try:
        state.load_baseline()
    except BaselineError as exc:
        pytest.fail(f"speedgate: {exc}", pytrace=False)
    obj = Perf(state, request.node.nodeid, speedgate_timer)
    request.node.stash[PERF_KEY] = obj
    return obj


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
    # xdist workers that share a device take turns, one whole test at a time.
    with _session(item.config).device_turn():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        result = yield
    finally:
        perf_obj = item.stash.get(PERF_KEY, None)
        if perf_obj is not None:
            # Each metric as a JUnit XML property of its test (written by --junitxml; travels under xdist).
            item.user_properties.extend(report.junit_properties(perf_obj.results))
    if perf_obj is not None and perf_obj.failures:
        raise SpeedRegression("\n".join(perf_obj.failures))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    rep = yield
    if rep.failed and PERF_KEY in item.stash:
        state = _session(item.config)
        state.failed_nodeids.add(item.nodeid)
        folder = state.settings.artifacts_dir
        if folder is not None:
            perf_obj = item.stash[PERF_KEY]
            kept = artifacts.write(
                folder, item.nodeid, [r.to_json() for r in perf_obj.results], perf_obj.samples,
                str(rep.longrepr), Path(str(item.config.rootpath)),
            )
            rep.sections.append(("speedgate artifacts", f"kept in {kept}"))
    return rep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = _session(config)
    if hasattr(config, "workerinput"):
        config.workeroutput[WORKER_OUTPUT] = state.worker_payload()  # type: ignore[attr-defined]
        return
    finish_errors: list[str] = []
    if state.settings.update_baselines and (state.records or state.metric_records):
        finished = state.update_baselines()
        config.stash[FINISH_KEY] = finished.lines
        finish_errors = finished.errors
    if state.settings.json_path is not None:
        _write(state.settings.json_path, json.dumps(state.json_report(), indent=2, sort_keys=True) + "\n")
    if state.settings.benchmark_json_path is not None:
        _write(state.settings.benchmark_json_path, json.dumps(state.benchmark_report(), indent=2) + "\n")
    if state.settings.chart_path is not None and state.records:
        from .chart import render

        keys = ", ".join(sorted({r["hardware_key"] for r in state.records}))
        try:
            render(state.records, state.settings.chart_path, f"speedgate: {keys}, {len(state.records)} cases")
        except RuntimeError as exc:
            finish_errors.append(str(exc))
    if state.records:
        text = report.markdown(state.records, state.failed_nodeids, state.header_lines())
        if state.settings.markdown_path is not None:
            _write(state.settings.markdown_path, text)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(text)
    if finish_errors:
        config.stash[ERRORS_KEY] = finish_errors
        session.exitstatus = pytest.ExitCode.TESTS_FAILED



def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _session(config)
    if hasattr(config, "workerinput") or not (state.records or state.metric_records or ERRORS_KEY in config.stash):
        return
    tr = terminalreporter
    tr.write_sep("=", "speedgate")
    for line in state.header_lines():
        tr.write_line(line)
    tolerance = f"default tolerance {state.settings.tolerance:.0%}"
    mode = "updating baselines" if state.settings.update_baselines else ("strict gate" if state.settings.strict else "gate")
    tr.write_line(f"{mode}; {tolerance}; timer {state.settings.timer}")
    for line in report.table(state.records, state.failed_nodeids):
        tr.write_line(line)
    for line in report.by_test(state.records):
        tr.write_line(line)
    for line in report.metrics_table(state.metric_records, state.failed_nodeids):
        tr.write_line(line)
    for line in report.notes(state.records):
        tr.write_line(line)
    for line in config.stash.get(FINISH_KEY, []):
        tr.write_line(line)
    for line in config.stash.get(ERRORS_KEY, []):
        tr.write_line(f"speedgate error: {line}", red=True, bold=True)


class XdistHooks:
    """Controller-side exchange with xdist workers; registered only when xdist is installed."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        payload = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        if payload:
            _session(self.config).absorb(payload)
