"""speedgate's side of pytest-xdist's exchange: the controller checks the baseline file before workers start, takes
each worker's results when it ends (or those its watchdog saved, when it died; or, after Ctrl-C, those the workers
sent while xdist had stopped listening), and explains a worker that speedgate ended; a worker ends itself after a
report that poisoned its CUDA context. The controller's scheduler hands out the longest work first where the
baseline file records tests' seconds (speedgate.schedule). Registered only where xdist is installed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from .faults import FaultWatch, WorkerCrashes
    from .session import SpeedgateSession

WORKER_OUTPUT = "speedgate"  # the key of a worker's results in xdist's workeroutput
# After Ctrl-C: how long the controller waits for the workers' closing reports (an interrupted worker sends its
# own within a second or two; one still running a test is stopped by xdist after this wait).
INTERRUPT_WAIT_S = 10.0


class XdistHooks:
    """The exchange with xdist workers. session(): the run's session (made on first use); load_baseline(state, error):
    the plugin's check of the baseline file; baseline_dir: the run's baseline folder; fault_watch(): this
    process's fault watch or None."""

    def __init__(self, config: pytest.Config, session: Callable[[], SpeedgateSession], load_baseline: Callable[..., None],
                 baseline_dir: Path, fault_watch: Callable[[], FaultWatch | None]) -> None:
        self.config = config
        self._session = session
        self._load_baseline = load_baseline
        self._baseline_dir = baseline_dir
        self._fault_watch = fault_watch  # this process's, once a test that used perf made one
        self._crashes: WorkerCrashes | None = None
        self._heard: set[str] = set()  # workers whose end the controller took (absorbed, or counted as lost)
        self._measuring: set[str] = set()  # workers that reported a test using perf: they hold results to take

    @property
    def crashes(self) -> WorkerCrashes:
        if self._crashes is None:
            from .faults import WorkerCrashes

            self._crashes = WorkerCrashes()
        return self._crashes

    @pytest.hookimpl(tryfirst=True)  # before xdist's own sessionstart starts the workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # The controller collects nothing, so a worker's usage error about the baseline would reach it as an
        # INTERNALERROR naming no file: check the file here first. Whether any test uses perf is not known yet,
        # but a broken <hardware_key>.json in speedgate's own folder is an error whichever tests run. Only where
        # that folder holds baseline files: naming the file asks NVML for the hardware key, which a project that
        # never blessed anything is spared.
        controller = self.config.pluginmanager.has_plugin("dsession")
        folder = self._baseline_dir
        if not (controller and folder.is_dir() and any(folder.glob("*.json"))):
            return
        state = self._session()
        if state.book.path_for(state.bench.hardware_key).is_file():
            self._load_baseline(state, pytest.UsageError)

    @pytest.hookimpl(tryfirst=True)  # before xdist's own, which makes its scheduler for --dist
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        # speedgate.schedule: the longest work first, where this hardware's baseline file records tests' seconds.
        # Only where speedgate's folder holds baseline files (as above): a project without them keeps xdist's
        # scheduler, and loads nothing of speedgate's for it. Where the command line asked for the schedule and
        # xdist's order is kept all the same, the run says why.
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        asked = config.getoption("speedgate_schedule", None) == "longest-first"

        def kept(why: str) -> None:
            if asked and terminal is not None:
                terminal.write_line(f"speedgate: --speedgate-schedule longest-first: xdist's order kept ({why})")

        folder = self._baseline_dir
        if not (folder.is_dir() and any(folder.glob("*.json"))):
            return kept(f"no baseline file in {folder}: a bless records each test's seconds")
        xdists = config.pluginmanager.get_plugin("dsession")
        if any(impl.plugin not in (self, xdists) for impl in config.hook.pytest_xdist_make_scheduler.get_hookimpls()):
            return kept("the project or another plugin makes xdist's scheduler")
        from . import schedule
        from .baseline import recorded_seconds

        state = self._session()
        if not schedule.wanted(config, state.settings.schedule):
            return kept("it applies under --dist load, without --maxschedchunk")
        key = state.bench.hardware_key
        seconds = recorded_seconds(state.book.doc_for(key))  # checked by pytest_sessionstart above
        if not seconds:
            return kept(f"{state.book.path_for(key)} records no test's seconds: a bless that rewrites it records them")
        from .case_ids import AnchoredIds

        test_ids = AnchoredIds.of_run(config)

        def said(made: schedule.Plan, workers: int) -> None:
            if made.known and terminal is not None:
                terminal.write_line(schedule.plan_words(made, workers, state.book.path_for(key)))

        return schedule.scheduler_class()(config, log, seconds, test_ids, said)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if _worker_id(node) in self._heard:
            return
        self._heard.add(_worker_id(node))
        output = getattr(node, "workeroutput", {})
        if output.get(WORKER_OUTPUT):
            self._session().absorb(output[WORKER_OUTPUT])
        elif WORKER_OUTPUT not in output:  # crashed, killed, or ended after a CUDA fault: what it measured since its last report never arrived
            self._session().ledger.lost_workers.append(_worker_id(node))

    def after_interrupt(self, stop: Callable[[], bool] | None = None) -> None:
        """On the controller of a run ended by Ctrl-C: the closing report of each worker that reported a test using
        perf, which xdist never handed on (its loop ended at the interrupt, while interrupted workers were still
        sending theirs), waited for up to INTERRUPT_WAIT_S (read at the call: a test sets it), then taken as at a
        worker's end; a worker whose report did not come is counted as lost. What finished and passed is then
        blessed, as in a run without xdist. A worker that ran no test using perf holds nothing of speedgate's: it is
        neither waited for nor counted. stop: ends the wait early when it says so (another Ctrl-C); the reports
        already in are taken."""
        dsession = self.config.pluginmanager.get_plugin("dsession")
        nodes = [n for n in getattr(getattr(dsession, "sched", None), "nodes", None) or []
                 if _worker_id(n) in self._measuring and _worker_id(n) not in self._heard]
        deadline = time.monotonic() + INTERRUPT_WAIT_S
        while any(WORKER_OUTPUT not in (getattr(n, "workeroutput", None) or {}) for n in nodes) \
                and time.monotonic() < deadline and not (stop is not None and stop()):
            time.sleep(0.05)
        for node in nodes:
            self.pytest_testnodedown(node, None)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.config.pluginmanager.has_plugin("dsession"):  # only the xdist controller explains a worker's crash
            self.crashes.note_start(nodeid)

    @pytest.hookimpl(trylast=True)  # a worker: after xdist sent the report; the controller: after it was shown
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(self.config, "workerinput"):
            watch = self._fault_watch()  # made by a test that used perf; none: nothing to end
            if watch is not None:
                watch.end_if_poisoned(report)
            return
        if getattr(report, "speedgate_measured", False):  # set by the plugin on a test using perf (plugin.py)
            self._measuring.add(_worker_id(getattr(report, "node", None)))
        if getattr(report, "speedgate_fault", None) and (payload := self.crashes.note_report(report)):
            self._session().absorb(payload)  # the results of a worker that ended after a sticky CUDA error

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # the xdist WorkerController that died
        workerinput = getattr(node, "workerinput", {})
        from .deadline import crash_story

        story, payload = crash_story(workerinput["testrunuid"], workerinput["workerid"]) if workerinput else (None, None)
        if payload:  # the results the worker had, saved by its watchdog before it ended the worker
            self._session().absorb(payload)
        from .faults import timeout_setting

        self.crashes.explain(crashitem, report, timeout_setting(self.config), story)


def _worker_id(node: Any) -> str:
    """An xdist worker's id (gw0, gw1...), '?' where the node names none."""
    return str(getattr(getattr(node, "gateway", None), "id", "?"))
