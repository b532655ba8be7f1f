"""pytest hooks for speedgate. Thin: each forwards to options, the session, the fixture or finish."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import linecache
import os
import warnings
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import faults
from .options import (
    Settings,
    SettingsError,
    add_options,
    add_short_spellings,
    pin_workers_asked,
    read_settings,
    shadowed_words,
    value_options,
)

# What only a test that uses perf, xdist, or the end of a run with results needs (the session too) is imported
# where it is used: every pytest run where the plugin is installed loads this module, and most never ask for perf.
if TYPE_CHECKING:
    from .devices import Assignment
    from .finish import Finish
    from .fixture import Perf
    from .session import SpeedgateSession

SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()
SESSION_KEY: pytest.StashKey[SpeedgateSession] = pytest.StashKey()
PERF_KEY: pytest.StashKey[Perf] = pytest.StashKey()
ASSIGNMENT_KEY: pytest.StashKey[Assignment | None] = pytest.StashKey()
FINISH_KEY: pytest.StashKey[Finish] = pytest.StashKey()
FAULTS_KEY: pytest.StashKey[faults.FaultWatch] = pytest.StashKey()
SHADOWED_KEY: pytest.StashKey[list[str]] = pytest.StashKey()  # short spellings another plugin or conftest defines
STDERR_KEY: pytest.StashKey[int] = pytest.StashKey()  # the real stderr, whatever pytest's capture does to fd 2
WATCHDOG_KEY: pytest.StashKey[faults.Watchdog] = pytest.StashKey()
DEADLINE_MARKER = "speedgate_deadline"
WORKER_OUTPUT = "speedgate"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Generator[None, None, None]:
    # Before any conftest can start CUDA, and only when asked (--speedgate-pin-workers, ini speedgate_pin_workers):
    # give this xdist worker its own GPU. Whether a test uses perf is only known after collection, which the
    # conftests precede, so the command line and the ini file decide; unasked, the environment is left alone.
    if os.environ.get("PYTEST_XDIST_WORKER") and pin_workers_asked(early_config):  # pin_worker: only in a worker
        from .devices import pin_worker

        early_config.stash[ASSIGNMENT_KEY] = pin_worker()
    _drop_option_values(early_config, args)
    try:
        return (yield)
    finally:
        # After the project's conftests registered their options: --update-baselines and the other short
        # spellings become speedgate's only where no one else took them.
        early_config.stash[SHADOWED_KEY] = add_short_spellings(parser)


def _drop_option_values(early_config: pytest.Config, args: list[str]) -> None:
    """`--baseline-dir DIR`: until the short spellings exist, pytest's early parse takes DIR for a test path and would
    look for conftests there. Drop such values from the paths that initial conftests are looked up from."""
    paths = getattr(early_config.known_args_namespace, "file_or_dir", None)
    if not paths:
        return
    for flag, value in zip(args, args[1:]):
        if flag in value_options() and value in paths:
            paths.remove(value)


def pytest_configure(config: pytest.Config) -> None:
    if config.option.help or config.option.version:
        return  # --help and --version must work whatever the ini holds; no test runs
    try:
        settings = read_settings(config)
    except SettingsError as exc:
        raise pytest.UsageError(f"speedgate: {exc}") from None
    config.stash[SETTINGS_KEY] = settings
    config.stash[FAULTS_KEY] = faults.FaultWatch(getattr(config, "workerinput", {}).get("workerid"))
    config.addinivalue_line("markers", f"{DEADLINE_MARKER}(seconds): this test's deadline (speedgate ends it as hung "
                                       "after seconds without finishing a comparison; 0: none)")
    # Duplicated now, while fd 2 is the terminal: the deadline's story must reach it from inside a captured test.
    config.stash[STDERR_KEY] = os.dup(2)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config), "speedgate-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    watchdog = config.stash.get(WATCHDOG_KEY, None)
    if watchdog is not None:
        watchdog.close()
    if STDERR_KEY in config.stash:
        os.close(config.stash[STDERR_KEY])
        del config.stash[STDERR_KEY]


def _session(config: pytest.Config) -> SpeedgateSession:
    """The run's session, made when first needed (a test asks for perf, a worker reports, the run ends with work)."""
    state = config.stash.get(SESSION_KEY, None)
    if state is None:
        from .session import SpeedgateSession

        # A pinned worker's device is known from the start; an unpinned worker's is looked up by the first test
        # that takes a device turn.
        state = config.stash[SESSION_KEY] = SpeedgateSession(config.stash[SETTINGS_KEY],
                                                             config.stash.get(ASSIGNMENT_KEY, None))
    return state


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before -k/-m deselect any: case ids come from the test files, and a deselected test still exists.
    collected = [(i.nodeid, Path(i.path), "perf" in getattr(i, "fixturenames", ())) for i in items]
    for item in items:  # a bad deadline is a usage error before any test runs, not a hang later
        _deadline_of(item)
    if any(uses_perf for _, _, uses_perf in collected):  # a suite that never asks for perf costs nothing here
        from .session import args_folder

        _session(config).note_collected(collected, config.inipath, args_folder(config.args, config.invocation_params.dir),
                                        whole_files=not _last_failed_only(config))
        if config.stash.get(SHADOWED_KEY, None):  # said only to a run that uses speedgate
            warnings.warn(pytest.PytestConfigWarning(shadowed_words(config.stash[SHADOWED_KEY])), stacklevel=1)


def _last_failed_only(config: pytest.Config) -> bool:
    """Whether --lf narrows this run's collection: pytest then collects only the failed tests of a file that had
    failures (and skips the other files), before any hook sees the items."""
    cache = getattr(config, "cache", None)
    return bool(config.getoption("lf", False)) and cache is not None and bool(cache.get("cache/lastfailed", {}))


def pytest_collection_finish(session: pytest.Session) -> None:
    # Fail fast, before any test runs, when the suite uses the gate and its baseline file is unusable.
    if any("perf" in getattr(item, "fixturenames", ()) for item in session.items):
        _load_baseline(_session(session.config), pytest.UsageError, "; the file was left untouched")


def _load_baseline(state: SpeedgateSession, error: Any, suffix: str = "") -> None:
    from .baseline import BaselineError

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
    from .fixture import Perf

    state = _session(request.config)
    _load_baseline(state, pytest.fail.Exception)
    request.node.stash[PERF_KEY] = obj = Perf(state, request.node.nodeid, speedgate_timer)
    return obj


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
    # xdist workers that share a device take turns, one whole test that times with perf at a time (setup and
    # teardown too: another worker's untimed kernels would corrupt its samples). Tests without perf never wait.
    if "perf" not in getattr(item, "fixturenames", ()):
        return (yield)
    state = _session(item.config)
    # The deadline counts no wait for the device; a wait on another run's hold is said on the terminal.
    with state.device_turn(item.nodeid, item.config.rootpath, _say(item.config)), _deadline(item):
        return (yield)


def _say(config: pytest.Config) -> Callable[[str], None]:
    """A line on the terminal from inside a test (pytest captures fd 2 there; an xdist worker's stderr reaches the
    controller's terminal, its stdout does not)."""
    fd = config.stash[STDERR_KEY]

    def say(line: str) -> None:
        os.write(fd, f"\n{line}\n".encode())

    return say


def _deadline_of(item: pytest.Item) -> float:
    """The item's deadline in seconds (0: none): its @pytest.mark.speedgate_deadline, else the run's setting."""
    from .options import deadline_seconds

    marker = item.get_closest_marker(DEADLINE_MARKER)
    if marker is None:
        return item.config.stash[SETTINGS_KEY].deadline_s
    value = marker.args[0] if marker.args else marker.kwargs.get("seconds")
    try:
        return deadline_seconds(str(value))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"speedgate: {item.nodeid}: @pytest.mark.{DEADLINE_MARKER}: {exc}") from None


@contextlib.contextmanager
def _deadline(item: pytest.Item) -> Iterator[None]:
    """Arm speedgate's deadline for a test that uses perf; every comparison it finishes restarts the clock."""
    seconds = _deadline_of(item)
    if not seconds:
        yield
        return
    config = item.config
    watchdog = config.stash.get(WATCHDOG_KEY, None)
    if watchdog is None:
        workerinput = getattr(config, "workerinput", None)
        side = faults.side_file(workerinput["testrunuid"], workerinput["workerid"]) if workerinput else None
        # faulthandler has one timer a process: pytest's faulthandler_timeout, when set, keeps it.
        watchdog = config.stash[WATCHDOG_KEY] = faults.Watchdog(config.stash[STDERR_KEY], side,
                                                         backstop=not _faulthandler_timeout(config),
                                                         payload=lambda: _session(config).worker_payload())
    state = _session(config)
    watchdog.arm(item.nodeid, seconds)
    state.progress = watchdog.progress
    try:
        yield
    finally:
        state.progress = None
        watchdog.disarm()


def _faulthandler_timeout(config: pytest.Config) -> float:
    try:
        return float(config.getini("faulthandler_timeout") or 0)
    except (ValueError, TypeError):
        return 0.0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Serial run: after a sticky CUDA error, a case that uses perf would only fail with the culprit's error.
    not_run = item.config.stash[FAULTS_KEY].not_run()
    if not_run and "perf" in getattr(item, "fixturenames", ()):
        pytest.fail(not_run, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    perf_obj = item.stash.get(PERF_KEY, None)
    try:
        result = yield
    finally:
        if perf_obj is not None:
            _junit_properties(item, perf_obj)
    if perf_obj is not None:
        _raise_late_failures(item, perf_obj)
    return result


def _junit_properties(item: pytest.Item, perf_obj: Perf) -> None:
    if _junit_per_test(item.config):  # travels under xdist, as report data
        from . import export

        item.user_properties.extend(export.junit_properties(perf_obj.results))


def _raise_late_failures(item: pytest.Item, perf_obj: Perf) -> None:
    """After a body that passed: a late GPU fault fails the test that queued the kernel, then its regressions."""
    faults.synchronize_cuda()
    if perf_obj.failures:
        from .fixture import SpeedRegression

        _raise_at_the_test(item, SpeedRegression("\n".join(perf_obj.failures)), _failing_call_site(item, perf_obj))


def _failing_call_site(item: pytest.Item, perf_obj: Perf) -> int | None:
    """The test's line that led to its first failing comparison or metric (a perf.compare call, or the call of a
    helper that made it); None when the test's frame was not on the stack (a fixture compared)."""
    from .verdict import fails

    settings = item.config.stash[SETTINGS_KEY]
    code = _test_code(item)
    sites = _session(item.config).call_sites
    for result_id, verdict in [*((r.case_id, r.verdict) for r in perf_obj.results),
                               *((m.metric_id, m.verdict) for m in perf_obj.metrics)]:
        if code is None or not fails(verdict, settings.strict):
            continue
        for filename, first_line, line in sites.get(result_id, ()):  # the test's own frame, if it is on the stack
            if (filename, first_line) == (code.co_filename, code.co_firstlineno):
                return line
    return None


def _test_code(item: pytest.Item) -> Any:
    """The test function's code object (None for a test that is no Python function)."""
    func = inspect.unwrap(getattr(item, "obj", None) or (lambda: None))
    return getattr(getattr(func, "__func__", func), "__code__", None)


def _raise_at_the_test(item: pytest.Item, exc: BaseException, line: int | None) -> None:
    """Raise exc from a frame that pytest shows as the test's own: its file, its first line, at line (the comparison
    that failed; else the line after its def). The test has returned by now, so the hook's frames would be the only
    ones left; pytest cuts a test's traceback at the frame whose code has the test's file and first line, so this
    frame is all it shows (with --tb=short too), with the test file's source around the line."""
    code = _test_code(item)
    if code is None:
        raise exc
    line = max(line or 0, code.co_firstlineno + 1)
    # Where the test's own line stands, so that Python's markers under it span that line's code, not a raise's.
    real = linecache.getline(code.co_filename, line).rstrip()
    indent, width = len(real) - len(real.lstrip()) or 4, len(real.strip())
    raise_line = " " * indent + "raise (_f" + " " * max(0, width - len("raise (_f)")) + ")"
    source = "\n" * (code.co_firstlineno - 1) + f"def {code.co_name}():\n" + "\n" * (line - code.co_firstlineno - 1)
    source += raise_line + "\n"
    namespace: dict[str, Any] = {"_f": exc}
    exec(compile(source, code.co_filename, "exec"), namespace)  # a frame only: the code is the two lines above
    namespace[code.co_name]()


def _junit_per_test(config: pytest.Config) -> bool:
    """Whether each result becomes a property of its test: pytest's xunit2 schema (its default family) has no
    testcase properties, xunit1 and legacy do (pytest's record_property follows the same rule)."""
    try:
        return config.getini("junit_family") != "xunit2"
    except ValueError:  # junitxml disabled (-p no:junitxml): the properties are only report data
        return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    rep = yield
    if PERF_KEY in item.stash:
        kept = _session(item.config).note_outcome(item.nodeid, rep, item.stash[PERF_KEY], Path(str(item.config.rootpath)))
        if kept is not None:
            rep.sections.append(("speedgate artifacts", f"kept in {kept}"))
    item.config.stash[FAULTS_KEY].after_report(item.nodeid, rep, call.excinfo, lambda: _session(item.config).worker_payload())
    return rep


@pytest.hookimpl(tryfirst=True)  # before pytest's JUnit writer, which writes its file in its sessionfinish
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        # Always a key, so the controller can tell a worker that finished from one that died; empty when no test
        # of this worker used perf.
        made = SESSION_KEY in config.stash
        config.workeroutput[WORKER_OUTPUT] = _session(config).worker_payload() if made else ""  # type: ignore[attr-defined]
    elif _has_work(config) and not config.option.collectonly:  # --co runs nothing: no report is rewritten
        _finish(session, exitstatus)


def _has_work(config: pytest.Config) -> bool:
    """Something was measured, or a report file was asked for: there is something to bless, write or show."""
    made = config.stash.get(SESSION_KEY, None)
    return (made is not None and made.touched) or _files_asked(config.stash[SETTINGS_KEY])


def _finish(session: pytest.Session, exitstatus: int) -> None:
    from .finish import finish_run

    state = _session(session.config)
    done = session.config.stash[FINISH_KEY] = finish_run(state, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if done.errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _junit_suite_properties(session.config, state)


def _files_asked(settings: Settings) -> bool:
    """Whether a report file was asked for: it is written (empty) even when no test used perf."""
    paths = (settings.json_path, settings.benchmark_json_path, settings.markdown_path, settings.chart_path)
    return any(path is not None for path in paths)


def _junit_suite_properties(config: pytest.Config, state: SpeedgateSession) -> None:
    """The run's hardware key and verdict tally as properties of the JUnit test suite (valid in every family), as
    pytest's record_testsuite_property adds them; only on the controller, which alone writes the file."""
    from _pytest.junitxml import xml_key  # the key record_testsuite_property reads; pytest has no public one

    xml = config.stash.get(xml_key, None)
    if xml is None or not state.records:
        return
    from . import export

    for name, value in export.junit_suite_properties(state.records):
        xml.add_global_property(name, value)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    done = config.stash.get(FINISH_KEY, None)
    if done is None:
        return
    state = _session(config)
    if not (state.records or state.metric_records or done.errors or done.warnings or done.lines or done.alerts):
        return
    terminalreporter.write_sep("=", "speedgate")
    from .finish import terminal_lines

    lines = terminal_lines(state, done)
    if config.option.verbose <= -2:  # -qq: one line of counts, then what went wrong; the tables are the reports'
        from .report import tally

        counts = f"speedgate: {len(state.records)} cases: {tally(state.records)}"
        if state.metric_records:
            counts += f"; {len(state.metric_records)} metrics: {tally(state.metric_records)}"
        lines = [(counts, False), *((line, error) for line, error in lines if error)]
    for line, error in lines:
        terminalreporter.write_line(line, red=error, bold=error)


class XdistHooks:
    """Controller-side exchange with xdist workers; registered only when xdist is installed."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.crashes = faults.WorkerCrashes()

    @pytest.hookimpl(tryfirst=True)  # before xdist's own sessionstart starts the workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # The controller collects nothing, so a worker's usage error about the baseline would reach it as an
        # INTERNALERROR naming no file: check the file here first. Whether any test uses perf is not known yet,
        # but a broken <hardware_key>.json in speedgate's own folder is an error whichever tests run. Only where
        # that folder holds baseline files: naming the file asks NVML for the hardware key, which a project that
        # never blessed anything is spared.
        controller = self.config.pluginmanager.has_plugin("dsession")
        folder = self.config.stash[SETTINGS_KEY].baseline_dir
        if not (controller and folder.is_dir() and any(folder.glob("*.json"))):
            return
        state = _session(self.config)
        if state.baseline_path.is_file():
            _load_baseline(state, pytest.UsageError, "; the file was left untouched")

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        if output.get(WORKER_OUTPUT):
            _session(self.config).absorb(output[WORKER_OUTPUT])
        elif WORKER_OUTPUT not in output:  # crashed, killed, or ended after a CUDA fault: what it measured since its last report never arrived
            _session(self.config).lost_workers.append(str(getattr(getattr(node, "gateway", None), "id", "?")))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.crashes.note_start(nodeid)

    @pytest.hookimpl(trylast=True)  # a worker: after xdist sent the report; the controller: after it was shown
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(self.config, "workerinput"):
            self.config.stash[FAULTS_KEY].end_if_poisoned(report)
        elif payload := self.crashes.note_report(report):
            _session(self.config).absorb(payload)  # the results of a worker that ended after a sticky CUDA error

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # the xdist WorkerController that died
        workerinput = getattr(node, "workerinput", {})
        story, payload = faults.crash_story(workerinput["testrunuid"], workerinput["workerid"]) if workerinput else (None, None)
        if payload:  # the results the worker had, saved by its watchdog before it ended the worker
            _session(self.config).absorb(payload)
        self.crashes.explain(crashitem, report, faults.timeout_setting(self.config), story)
