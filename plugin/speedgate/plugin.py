"""pytest hooks for speedgate. Thin: each forwards to options, the session, the fixture, the deadline or finish; the
logic lives in those plain modules. speedgate's own hooks, for a project's conftest, are in hookspecs."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from . import hookspecs
from .options import (
    DEADLINE_MARKER,
    DEADLINE_MARKER_HELP,
    Settings,
    SettingsError,
    add_options,
    add_short_spellings,
    drop_option_values,
    pin_workers_asked,
    read_settings,
    shadowed_words,
)
from .reporting import ReportRegistry, Reports, ReportSettingsError

# What only a test that uses perf, xdist, or the end of a run with results needs (the session too) is imported
# where it is used: every pytest run where the plugin is installed loads this module, and most never ask for perf.
if TYPE_CHECKING:
    from .deadline import Watchdog
    from .devices import Assignment
    from .faults import FaultWatch
    from .finish import Finish
    from .fixture import Perf
    from .interrupts import Deferred
    from .session import SpeedgateSession
    from .timers import Timer, TimerKind

SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()
REPORTS_KEY: pytest.StashKey[Reports] = pytest.StashKey()  # the reports the run asked for, each with its file
SESSION_KEY: pytest.StashKey[SpeedgateSession] = pytest.StashKey()
PERF_KEY: pytest.StashKey[Perf] = pytest.StashKey()
ASSIGNMENT_KEY: pytest.StashKey[Assignment | None] = pytest.StashKey()
FINISH_KEY: pytest.StashKey[Finish] = pytest.StashKey()
FAULTS_KEY: pytest.StashKey[FaultWatch] = pytest.StashKey()
SHADOWED_KEY: pytest.StashKey[list[str]] = pytest.StashKey()  # short spellings another plugin or conftest defines
STDERR_KEY: pytest.StashKey[int] = pytest.StashKey()  # the real stderr, whatever pytest's capture does to fd 2
WATCHDOG_KEY: pytest.StashKey[Watchdog] = pytest.StashKey()
INTERRUPTED_KEY: pytest.StashKey[bool] = pytest.StashKey()  # a Ctrl-C reached pytest (_InterruptNote)
DURATIONS_KEY: pytest.StashKey[dict[str, float]] = pytest.StashKey()  # node id -> every test's seconds (_Durations)
# Ctrl-C noted, not raised, from the run's end to pytest_unconfigure (speedgate.interrupts), and the session to mark
DEFERRED_KEY: pytest.StashKey[tuple[Deferred, pytest.Session]] = pytest.StashKey()
REPORTS_PLUGIN = "speedgate-reports"  # the ReportRegistry, registered so that pytest_configure finds it


USES_PERF_KEY: pytest.StashKey[bool] = pytest.StashKey()


def uses_perf(item: pytest.Item) -> bool:
    """Whether a test asks for speedgate's own `perf` (speedgate.guest): only such a test is timed, takes device turns,
    has a deadline and has its faults read. Found once per test."""
    found = item.stash.get(USES_PERF_KEY, None)
    if found is None:
        found = "perf" in getattr(item, "fixturenames", ())
        if found:
            from .guest import reaches_ours

            found = reaches_ours(item)
        item.stash[USES_PERF_KEY] = found
    return found


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    reports = add_options(parser)
    pluginmanager.register(reports, REPORTS_PLUGIN)
    # A project's reports join as each conftest registers, before the command line is parsed.
    pluginmanager.hook.pytest_speedgate_reports.call_historic(result_callback=reports.add)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Generator[None, None, None]:
    # Before any conftest can start CUDA, and only when asked (--speedgate-pin-workers, ini speedgate_pin_workers):
    # give this xdist worker its own GPU; unasked, the environment is left alone.
    if os.environ.get("PYTEST_XDIST_WORKER") and pin_workers_asked(early_config):  # pin_worker: only in a worker
        from .devices import pin_worker

        early_config.stash[ASSIGNMENT_KEY] = pin_worker()
    drop_option_values(early_config, args)
    try:
        return (yield)
    finally:  # the project's conftests registered their options: the short spellings take only what is free
        taken = early_config.stash[SHADOWED_KEY] = add_short_spellings(parser)
        # The advice names a command that blesses here; imported only where it has something to change (a plain
        # run loads little), and reset where an earlier run in this process (pytester's) changed it.
        if taken or "speedgate.advice" in sys.modules:
            from .advice import spell_bless_flag

            spell_bless_flag(taken)


def pytest_configure(config: pytest.Config) -> None:
    if config.option.help or config.option.version:
        return  # --help and --version must work whatever the ini holds; no test runs
    try:
        config.stash[SETTINGS_KEY] = read_settings(config)
        config.stash[REPORTS_KEY] = cast(ReportRegistry, config.pluginmanager.get_plugin(REPORTS_PLUGIN)).asked(config.getoption)
    except (SettingsError, ReportSettingsError) as exc:  # a report's missing package too: found now, not after the suite
        raise pytest.UsageError(f"speedgate: {exc}") from None
    config.addinivalue_line("markers", DEADLINE_MARKER_HELP)
    config.stash[STDERR_KEY] = os.dup(2)  # now, while fd 2 is the terminal: a deadline's story must reach it
    config.pluginmanager.register(_InterruptNote(config), "speedgate-interrupt-note")
    if not hasattr(config, "workerinput"):  # the process that ends the run: a serial run, or xdist's controller
        config.pluginmanager.register(_Durations(config), "speedgate-durations")
    if config.pluginmanager.hasplugin("xdist"):
        _register_xdist_hooks(config)


class _InterruptNote:
    """Notes a Ctrl-C before pytest reports it: a second Ctrl-C can interrupt that report, and pytest then ends the
    session with the exit status of a run that finished, so its end would not know to bless only what finished."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.config.stash[INTERRUPTED_KEY] = True


class _Durations:
    """Every test's seconds (setup, call and teardown), whether it uses perf or not, as the process that ends the run
    sees its reports (xdist's controller gets its workers'): what a bless records for the schedule of -n
    (speedgate.schedule). A test counts once its teardown is reported: one cut short by Ctrl-C or a dead worker
    took no whole time. Nothing is imported."""

    def __init__(self, config: pytest.Config) -> None:
        self.seconds: dict[str, float] = config.stash.setdefault(DURATIONS_KEY, {})
        self._running: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        so_far = self._running.pop(report.nodeid, 0.0) + float(report.duration or 0.0)
        if report.when == "teardown":
            self.seconds[report.nodeid] = so_far
        else:
            self._running[report.nodeid] = so_far


def _register_xdist_hooks(config: pytest.Config) -> None:
    from .xdist_hooks import XdistHooks

    hooks = XdistHooks(config, lambda: _session(config), _load_baseline, config.stash[SETTINGS_KEY].baseline_dir,
                       lambda: config.stash.get(FAULTS_KEY, None))
    config.pluginmanager.register(hooks, "speedgate-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    deferred, session = config.stash.get(DEFERRED_KEY, (None, None))
    if deferred is not None:
        deferred.stop()
        if deferred.is_set() and session is not None:  # pressed in xdist's teardown or the summary: said stopped
            session.exitstatus = pytest.ExitCode.INTERRUPTED
    watchdog = config.stash.get(WATCHDOG_KEY, None)
    if watchdog is not None:
        watchdog.close()
    if STDERR_KEY in config.stash:
        os.close(config.stash[STDERR_KEY])
        del config.stash[STDERR_KEY]


def _faults(config: pytest.Config) -> FaultWatch:
    """This process's fault watch, made by the first test that uses perf (a run without perf never loads faults)."""
    watch = config.stash.get(FAULTS_KEY, None)
    if watch is None:
        from .faults import FaultWatch

        watch = config.stash[FAULTS_KEY] = FaultWatch(getattr(config, "workerinput", {}).get("workerid"))
    return watch


def _session(config: pytest.Config) -> SpeedgateSession:
    """The run's session, made when first needed (a test asks for perf, a worker reports, the run ends with work).
    A pinned worker's device is known from the start; an unpinned worker's is looked up at its first device turn.
    Its clock and the project's audit come through speedgate's hooks."""
    state = config.stash.get(SESSION_KEY, None)
    if state is None:
        from .session import SpeedgateSession

        hook = config.hook
        state = config.stash[SESSION_KEY] = SpeedgateSession(
            config.stash[SETTINGS_KEY], config.stash.get(ASSIGNMENT_KEY, None),
            make_timer=lambda kind: hook.pytest_speedgate_make_timer(config=config, kind=kind),
            audit=lambda evidence: hook.pytest_speedgate_audit(evidence=evidence))
    return state


@pytest.hookimpl(trylast=True)  # a project's clock first
def pytest_speedgate_make_timer(config: pytest.Config, kind: TimerKind) -> Timer:
    from .timers import make_timer

    return make_timer(kind)


FOREIGN_KEY: pytest.StashKey[list[str]] = pytest.StashKey()  # tests whose perf fixture is a project's own


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    # A conftest loaded during collection that defines one of speedgate's short spellings: say so, with the way out,
    # instead of argparse's bare traceback.
    rep = yield
    if rep.failed:
        from .guest import late_collision

        said = late_collision(str(rep.longrepr))
        if said:
            rep.longrepr = f"{said}\n(argparse: {str(rep.longrepr).strip().splitlines()[-1]})"
    return rep


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_deadlines(items)  # a bad deadline is a usage error before any test runs, not a hang later
    _note_foreign(config, items)
    if not any(uses_perf(item) for item in items):
        return  # a suite that never asks for perf costs nothing here
    from .case_ids import args_folder, whole_files_collected

    # Before -k/-m deselect any: case ids come from the test files, and a deselected test still exists.
    collected = [(item.nodeid, Path(item.path), uses_perf(item)) for item in items]
    _session(config).case_ids.note_collected(collected, config.inipath, args_folder(config.args, config.invocation_params.dir),
                                             whole_files=whole_files_collected(config))
    if config.stash.get(SHADOWED_KEY, None):  # said only to a run that uses speedgate
        warnings.warn(pytest.PytestConfigWarning(shadowed_words(config.stash[SHADOWED_KEY])), stacklevel=1)


def _check_deadlines(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker(DEADLINE_MARKER):
            _deadline_of(item)


def _note_foreign(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests whose perf is a project's own fixture, said once at the end (speedgate.guest)."""
    if any("perf" in getattr(item, "fixturenames", ()) for item in items):
        from .guest import foreign

        config.stash[FOREIGN_KEY] = foreign(items, uses_perf)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Fail fast, before any test runs, when the suite uses the gate and its baseline file is unusable.
    if any(uses_perf(item) for item in session.items):
        _load_baseline(_session(session.config), pytest.UsageError)


def _load_baseline(state: SpeedgateSession, error: Any) -> None:
    """This machine's baseline file, read and validated once; error (pytest's kind of failure) when it is unusable,
    saying how to recover (the file is never rewritten then)."""
    from .baseline import BaselineError

    try:
        state.book.doc_for(state.bench.hardware_key)
    except BaselineError as exc:
        from .advice import unusable_file_hint

        raise error(f"speedgate: {exc}; {unusable_file_hint()}") from None


@pytest.fixture
def speedgate_timer() -> Any:
    """The clock perf.compare uses; None means the session's (--speedgate-timer). Override to inject one."""
    return None


@pytest.fixture
def perf(request: pytest.FixtureRequest, speedgate_timer: Any) -> Perf:
    """Compare an optimized callable with its reference: perf.assert_close(...), perf.compare(...)."""
    from .fixture import Perf

    state = _session(request.config)
    _load_baseline(state, pytest.fail.Exception)
    request.node.stash[PERF_KEY] = obj = Perf(state, request.node.nodeid, speedgate_timer)
    return obj


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
    # xdist workers that share a device take turns, one whole test that times with perf at a time (setup and
    # teardown too: another worker's untimed kernels would corrupt its samples). Tests without perf never wait.
    timed = uses_perf(item)
    # One ptxas before the test's fixtures compile anything, in every test of a run that has tests using perf (the
    # session exists then: collection made it): what a test without perf compiles, a later one may time.
    state = _session(item.config) if timed else item.config.stash.get(SESSION_KEY, None)
    if state is not None:
        state.bench.settle_toolchain()
    if not timed or state is None:
        return (yield)
    # The deadline counts no wait for the device; a wait on another run's hold is said on the terminal.
    with state.bench.device_turn(item.nodeid, item.config.rootpath, _say(item.config)), _deadline(item, state):
        return (yield)


def _say(config: pytest.Config) -> Callable[[str], None]:
    """A line on the terminal from inside a test (pytest captures fd 2 there; an xdist worker's stderr reaches the
    controller's terminal, its stdout does not)."""
    fd = config.stash[STDERR_KEY]

    def say(line: str) -> None:
        os.write(fd, f"\n{line}\n".encode())

    return say


def _deadline_of(item: pytest.Item) -> float | None:
    """The item's deadline in seconds (0: none): its @pytest.mark.speedgate_deadline, else the run's setting; None
    when neither sets one (derived from the blessed entries when the test runs)."""
    from .deadline import marked_seconds

    try:
        return marked_seconds(item, item.config.stash[SETTINGS_KEY].deadline_s)
    except ValueError as exc:
        raise pytest.UsageError(f"speedgate: {exc}") from None


def _deadline(item: pytest.Item, state: SpeedgateSession) -> contextlib.AbstractContextManager[None]:
    """speedgate's deadline for a test that uses perf (speedgate.deadline.seconds_for); every comparison it finishes
    restarts the clock."""
    from . import deadline

    config = item.config
    seconds = deadline.seconds_for(item, _deadline_of(item), lambda: state.book.test_entries(
        state.bench.hardware_key, state.case_ids.case_id(item.nodeid)))
    if not seconds:
        return contextlib.nullcontext()
    if WATCHDOG_KEY not in config.stash:  # faulthandler has one timer a process: faulthandler_timeout keeps it
        config.stash[WATCHDOG_KEY] = deadline.watchdog_for(config, config.stash[STDERR_KEY], state.worker_payload)
    return deadline.armed(config.stash[WATCHDOG_KEY], item.nodeid, seconds, state.ledger)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Serial run: after a sticky CUDA error, a case that uses perf would only fail with the culprit's error.
    if uses_perf(item) and (not_run := _faults(item.config).not_run() or _session(item.config).bench.lock_refused):
        pytest.fail(not_run, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    perf_obj = item.stash.get(PERF_KEY, None)
    if perf_obj is None:
        return (yield)
    from .export import add_junit_properties
    from .late import raise_late_failures

    try:
        result = yield
    finally:  # each result a JUnit property of its test (report data: it travels under xdist)
        add_junit_properties(item, perf_obj.results)
    raise_late_failures(item, perf_obj, _session(item.config).ledger.call_sites, item.config.stash[SETTINGS_KEY].strict)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    rep = yield
    if PERF_KEY not in item.stash:
        return rep  # a test that never made speedgate's perf: its failures are its own
    rep.speedgate_measured = True  # report data: tells xdist's controller which workers hold results (xdist_hooks)
    kept = _session(item.config).note_outcome(item.nodeid, rep, item.stash[PERF_KEY], Path(str(item.config.rootpath)))
    if kept is not None:
        rep.sections.append(("speedgate artifacts", f"kept in {kept}"))
    _faults(item.config).after_report(item.nodeid, rep, call.excinfo, lambda: _session(item.config).worker_payload())
    return rep


@pytest.hookimpl(tryfirst=True)  # before pytest's JUnit writer, which writes its file in its sessionfinish
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    made = config.stash.get(SESSION_KEY, None)
    if hasattr(config, "workerinput"):
        # Always a key, so the controller can tell a worker that finished from one that died; empty when no test
        # of this worker used perf.
        from .xdist_hooks import WORKER_OUTPUT

        config.workeroutput[WORKER_OUTPUT] = "" if made is None else made.worker_payload()  # type: ignore[attr-defined]
        return
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or config.stash.get(INTERRUPTED_KEY, False)
    if interrupted:
        session.exitstatus = pytest.ExitCode.INTERRUPTED  # where pytest's own report of it was cut short
    hooks = config.pluginmanager.get_plugin("speedgate-xdist") if config.pluginmanager.has_plugin("dsession") else None
    if not (interrupted and hooks is not None) and not _has_work(config):
        return
    from .interrupts import Deferred

    # A Ctrl-C from here to pytest_unconfigure cuts the wait for workers short, never the writing nor the summary.
    again = Deferred(_say(config)).start()
    config.stash[DEFERRED_KEY] = (again, session)
    if interrupted and hooks is not None:  # the workers' reports that Ctrl-C left unread: what finished is blessed
        hooks.after_interrupt(stop=again.is_set)
    if _has_work(config):
        _finish(session, interrupted)


def _has_work(config: pytest.Config) -> bool:
    """Whether the run's end has anything to do: something measured, or a report file asked for (--co rewrites no
    report)."""
    made = config.stash.get(SESSION_KEY, None)
    return ((made is not None and made.touched) or config.stash[REPORTS_KEY].files_asked) \
        and not config.option.collectonly


def _finish(session: pytest.Session, interrupted: bool) -> None:
    """The end of the run on the controller (speedgate.finish); an error of it fails the run."""
    from .case_ids import AnchoredIds
    from .export import add_junit_suite_properties
    from .finish import finish_run

    config = session.config
    run = _session(config).closing(interrupted=interrupted, seconds=config.stash.get(DURATIONS_KEY, {}),
                                   test_id=AnchoredIds.of_run(config))
    done = session.config.stash[FINISH_KEY] = finish_run(run, session.config.stash[REPORTS_KEY])
    if done.errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    add_junit_suite_properties(session.config, run.records)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    foreign = config.stash.get(FOREIGN_KEY, [])
    if foreign and config.option.verbose >= 0:  # said once, quietly
        terminalreporter.write_line(f"speedgate: {len(foreign)} test(s) use a fixture named 'perf' that is not "
                                    f"speedgate's (the first: {foreign[0]}); speedgate stays off for them")
    _write_summary(terminalreporter, config)


def _write_summary(terminalreporter: Any, config: pytest.Config) -> None:
    done = config.stash.get(FINISH_KEY, None)
    if done is None:
        return
    from .finish import summary

    lines = summary(done, quiet=config.option.verbose <= -2)  # -qq: counts, then what went wrong
    if lines:
        terminalreporter.write_sep("=", "speedgate")
    for line, error in lines:
        terminalreporter.write_line(line, red=error, bold=error)
