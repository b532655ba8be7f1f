"""pytest hooks for speedgate. Thin: each forwards to options, the session, the fixture or finish."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from . import export, faults
from .baseline import BaselineError
from .devices import Assignment, pin_worker
from .finish import Finish, finish_run, terminal_lines
from .fixture import Perf, SpeedRegression
from .options import SettingsError, add_options, read_settings
from .session import SpeedgateSession

SESSION_KEY = pytest.StashKey[SpeedgateSession]()
PERF_KEY = pytest.StashKey[Perf]()
ASSIGNMENT_KEY = pytest.StashKey[Assignment | None]()
FINISH_KEY = pytest.StashKey[Finish]()
FAULTS_KEY = pytest.StashKey[faults.FaultWatch]()
WORKER_OUTPUT = "speedgate"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before any conftest can start CUDA: give this xdist worker its own GPU.
    early_config.stash[ASSIGNMENT_KEY] = pin_worker()


def pytest_configure(config: pytest.Config) -> None:
    if config.option.help or config.option.version:
        return  # --help and --version must work whatever the ini holds; no test runs
    try:
        settings = read_settings(config)
    except SettingsError as exc:
        raise pytest.UsageError(f"speedgate: {exc}") from None
    config.stash[SESSION_KEY] = SpeedgateSession(settings, config.stash.get(ASSIGNMENT_KEY, None))
    config.stash[FAULTS_KEY] = faults.FaultWatch(getattr(config, "workerinput", {}).get("workerid"))
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config), "speedgate-xdist")


def _session(config: pytest.Config) -> SpeedgateSession:
    return config.stash[SESSION_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before -k/-m deselect any: case ids come from the test files, and a deselected test still exists.
    _session(config).note_collected(
        [(i.nodeid, Path(i.path), "perf" in getattr(i, "fixturenames", ())) for i in items], config.inipath)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Fail fast, before any test runs, when the suite uses the gate and its baseline file is unusable.
    if any("perf" in getattr(item, "fixturenames", ()) for item in session.items):
        _load_baseline(_session(session.config), pytest.UsageError, "; the file was left untouched")


def _load_baseline(state: SpeedgateSession, error: Any, suffix: str = "") -> None:
    try:
        state.load_baseline()
    except BaselineError as exc:
        raise error(f"speedgate: {exc}{suffix}") from None


@pytest.fixture
def speedgate_timer() -> Any:
    """The clock perf.compare uses; None means the session's (--speedgate-timer). Override to inject one."""
    return None


@pytest.fixture
def perf(request: pytest.FixtureRequest, speedgate_timer: Any) -> Perf:
    """Compare an optimized callable with its reference: perf.assert_close(...), perf.compare(...)."""
    state = _session(request.config)
    _load_baseline(state, pytest.fail.Exception)
    request.node.stash[PERF_KEY] = obj = Perf(state, request.node.nodeid, speedgate_timer)
    return obj


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
    # xdist workers that share a device take turns, one whole test at a time.
    with _session(item.config).device_turn():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Serial run: after a sticky CUDA error, a case that uses perf would only fail with the culprit's error.
    not_run = item.config.stash[FAULTS_KEY].not_run()
    if not_run and "perf" in getattr(item, "fixturenames", ()):
        pytest.fail(not_run, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        result = yield
    finally:
        perf_obj = item.stash.get(PERF_KEY, None)
        if perf_obj is not None:  # each result as JUnit XML properties of its test (travels under xdist)
            item.user_properties.extend(export.junit_properties(perf_obj.results))
    if perf_obj is not None:
        faults.synchronize_cuda()  # an asynchronous GPU fault fails the test that queued the kernel, not the next
        if perf_obj.failures:
            raise SpeedRegression("\n".join(perf_obj.failures))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    rep = yield
    if PERF_KEY in item.stash:
        kept = _session(item.config).note_outcome(item.nodeid, rep, item.stash[PERF_KEY], Path(str(item.config.rootpath)))
        if kept is not None:
            rep.sections.append(("speedgate artifacts", f"kept in {kept}"))
    item.config.stash[FAULTS_KEY].after_report(item.nodeid, rep, call.excinfo, _session(item.config).worker_payload)
    return rep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config, state = session.config, _session(session.config)
    if hasattr(config, "workerinput"):
        config.workeroutput[WORKER_OUTPUT] = state.worker_payload()  # type: ignore[attr-defined]
        return
    done = config.stash[FINISH_KEY] = finish_run(state, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if done.errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    done = config.stash.get(FINISH_KEY, None)
    state = _session(config)
    if done is None or not (state.records or state.metric_records or done.errors or done.warnings or done.lines):
        return
    terminalreporter.write_sep("=", "speedgate")
    for line, error in terminal_lines(state, done):
        terminalreporter.write_line(line, red=error, bold=error)


class XdistHooks:
    """Controller-side exchange with xdist workers; registered only when xdist is installed."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.crashes = faults.WorkerCrashes()

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        payload = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        if payload:
            _session(self.config).absorb(payload)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.crashes.note_start(nodeid)

    @pytest.hookimpl(trylast=True)  # a worker: after xdist sent the report; the controller: after it was shown
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(self.config, "workerinput"):
            self.config.stash[FAULTS_KEY].end_if_poisoned(report)
        elif payload := self.crashes.note_report(report):
            _session(self.config).absorb(payload)  # the results of a worker that ended after a sticky CUDA error

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        self.crashes.explain(crashitem, report, faults.timeout_setting(self.config))
