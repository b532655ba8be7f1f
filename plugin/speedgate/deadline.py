"""speedgate's deadline, which ends and names a test that hangs: a test's deadline (its marker, else the run's
setting), the watchdog that enforces it (Watchdog), and what it leaves for the xdist controller (crash_story).

A kernel that never finishes leaves the host waiting inside a CUDA call (a synchronize, a copy) that never returns
to Python, so nothing raised in the test's thread can end it. A watchdog thread can: CUDA's waits release the GIL.
When the deadline passes it writes which test hung (and since when) and the stacks of every thread, and ends the
process with os._exit. Serially that ends the run; under xdist it ends the worker, xdist names the test in its crash
report (the controller adds what the watchdog wrote, see crash_story, and keeps the results it saved) and starts a
fresh worker for the rest. A C call that keeps the GIL would starve the watchdog: faulthandler's own timer (a C
thread, no GIL) then dumps the stacks and exits a little later, unless pytest's faulthandler_timeout already uses
that one timer of the process. The clock restarts whenever a comparison of the test finishes (progress), so the
deadline is per comparison: a test with many slow comparisons is not cut short by their sum.

Imports neither pytest nor torch: items and configs are duck-typed.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .options import DEADLINE_MARKER as MARKER
from .options import deadline_seconds

if TYPE_CHECKING:
    from .ledger import RunLedger


EXIT_DEADLINE = 1  # what faulthandler's exit=True uses too; under xdist the controller only sees a crash
HOW_TO_CHANGE = "--speedgate-deadline SECONDS, ini speedgate_deadline, or @pytest.mark.speedgate_deadline(SECONDS)"


def backstop_grace(seconds: float) -> float:
    """How long after the watchdog faulthandler's timer fires: time for the watchdog to write its story first."""
    return max(2.0, 0.05 * seconds)


def side_file(testrunuid: str, worker: str) -> Path:
    """Where an xdist worker's watchdog writes what it ended, for the controller's crash report: under the system's
    temporary folder, named by xdist's run id (both sides know it) and the worker id."""
    return Path(tempfile.gettempdir()) / "speedgate-deadlines" / f"{testrunuid}-{worker}.txt"


class Watchdog:
    """One process's deadline: armed for a test, restarted by progress, disarmed after the test.

    stderr_fd: a descriptor of the real stderr (pytest's capture redirects fd 2 while a test runs). side: under xdist,
    the file the controller reads when the worker dies. backstop: whether faulthandler's timer is free to use.
    payload: under xdist, the worker's results so far, written beside the side file for the controller to keep.
    """

    def __init__(self, stderr_fd: int, side: Path | None = None, backstop: bool = True,
                 payload: Callable[[], str] | None = None) -> None:
        self._stderr_fd = stderr_fd
        self._side = side
        self._payload = payload  # under xdist: the worker's results so far, which would die with it
        self._side_fd: int | None = None
        self._backstop = backstop
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._nodeid: str | None = None
        self._seconds = 0.0
        self._due = 0.0
        self._since = ""

    def arm(self, nodeid: str, seconds: float) -> None:
        """Start the clock for a test: it must finish, or make progress, within seconds."""
        with self._cond:
            self._nodeid, self._seconds, self._since = nodeid, seconds, "it started"
            self._restart()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="speedgate-deadline", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def progress(self, what: str) -> None:
        """A comparison finished: the next one gets the whole deadline."""
        with self._cond:
            if self._nodeid is None:
                return
            self._since = f"{what} finished"
            self._restart()
            self._cond.notify_all()

    def disarm(self) -> None:
        with self._cond:
            if self._nodeid is None:
                return
            self._nodeid = None
            if self._backstop:
                faulthandler.cancel_dump_traceback_later()
            if self._side_fd is not None:  # nothing to tell: the test ended in time
                os.ftruncate(self._side_fd, 0)
                os.lseek(self._side_fd, 0, os.SEEK_SET)  # faulthandler writes at the offset: no hole before it
            self._cond.notify_all()

    def close(self) -> None:
        self.disarm()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._side_fd is not None:
            os.close(self._side_fd)
            self._side_fd = None
            if self._side is not None:
                self._side.unlink(missing_ok=True)

    def _restart(self) -> None:
        self._due = time.monotonic() + self._seconds
        if self._backstop:
            faulthandler.dump_traceback_later(self._seconds + backstop_grace(self._seconds), exit=True,
                                              file=self._story_fd())

    def _story_fd(self) -> int:
        """Where the stacks go: the side file under xdist (the controller shows it), else stderr."""
        if self._side is None:
            return self._stderr_fd
        if self._side_fd is None:
            self._side.parent.mkdir(parents=True, exist_ok=True)
            self._side_fd = os.open(self._side, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        return self._side_fd

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._nodeid is None:
                    self._cond.wait()
                    continue
                left = self._due - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._fire()

    def _fire(self) -> None:
        headline = (f"speedgate: {self._nodeid} ran past its deadline of {self._seconds:g} s since {self._since}: "
                    f"it hung, and speedgate ends this process ({HOW_TO_CHANGE} changes the deadline)")
        fd = self._story_fd()
        if fd != self._stderr_fd:  # the side file, which faulthandler may have written: after what it wrote. Never
            os.lseek(fd, 0, os.SEEK_END)  # stderr: a pipe (every CI log) cannot seek, and the story must get out
        os.write(fd, f"\n{headline}. The stacks of its threads:\n".encode())
        faulthandler.dump_traceback(file=fd, all_threads=True)
        if fd != self._stderr_fd:  # under xdist: a line on the terminal too; the stacks go with the crash report
            os.write(self._stderr_fd, f"\n{headline}; its stacks: in the crash report\n".encode())
        if self._side is not None and self._payload is not None:
            try:
                payload_file(self._side).write_text(self._payload())
            except Exception as exc:  # noqa: BLE001  # the process ends either way; say what is lost
                os.write(self._stderr_fd, f"speedgate: this worker's results are lost: {exc!r}\n".encode())
        os._exit(EXIT_DEADLINE)


def payload_file(side: Path) -> Path:
    return side.with_suffix(".payload.json")


def crash_story(testrunuid: str, worker: str) -> tuple[str | None, str | None]:
    """What a worker's watchdog (or faulthandler's timer) wrote before the worker died, and the worker's results it
    saved; None for what it did not write. Read once: the files are removed, so a fresh worker of the same id starts
    clean."""
    path = side_file(testrunuid, worker)
    found: list[str | None] = []
    for each in (path, payload_file(path)):
        try:
            text = each.read_text(errors="replace")
        except OSError:
            found.append(None)
            continue
        each.unlink(missing_ok=True)
        found.append(text.strip() or None)
    return found[0], found[1]


def marked_seconds(item: Any, default_s: float | None) -> float | None:
    """A test's deadline in seconds (0: none): its @pytest.mark.speedgate_deadline, else default_s (the run's
    setting; None when unset); ValueError naming the test and the marker when the marker's value is no deadline."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return default_s
    value = marker.args[0] if marker.args else marker.kwargs.get("seconds")
    try:
        return deadline_seconds(str(value))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"{item.nodeid}: @pytest.mark.{MARKER}: {exc}") from None


# Unset, a test's deadline is what its comparisons took when blessed, times DERIVED_FACTOR, at least DERIVED_FLOOR_S
# (the test's own work before its first comparison, a compile, is in no entry) and at most the flat default.
DERIVED_FACTOR = 10.0
DERIVED_FLOOR_S = 300.0


def from_blessed(entries: list[Any]) -> float:
    """A test's deadline from its baseline entries: the longest comparison as blessed (both first calls, then its
    rounds of both sides), times DERIVED_FACTOR, within [DERIVED_FLOOR_S, DEFAULT_DEADLINE_S]; the flat default for
    a test with no entry."""
    from .options import DEFAULT_DEADLINE_S

    def took_s(entry: Any) -> float:
        ms = {key: float(entry.get(key) or 0.0) for key in ("reference_first_ms", "optimized_first_ms", "reference_ms",
                                                           "optimized_ms", "rounds")}
        return (ms["reference_first_ms"] + ms["optimized_first_ms"]
                + (ms["reference_ms"] + ms["optimized_ms"]) * ms["rounds"]) / 1e3

    longest = max((took_s(entry) for entry in entries), default=0.0)
    if not entries:
        return DEFAULT_DEADLINE_S
    return min(max(DERIVED_FACTOR * longest, DERIVED_FLOOR_S), DEFAULT_DEADLINE_S)


def timeout_limit(item: Any) -> float:
    """pytest-timeout's limit for the test in seconds (its marker, --timeout, ini timeout, env PYTEST_TIMEOUT; 0:
    none): its signal cannot interrupt a wait in CUDA, so speedgate's watchdog ends a hung comparison at it too."""
    config = item.config
    if not config.pluginmanager.hasplugin("timeout"):
        return 0.0
    marker = item.get_closest_marker("timeout")
    value: Any = None
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if value is None:
        value = getattr(config.option, "timeout", None)
    if value is None:
        value = os.environ.get("PYTEST_TIMEOUT")
    if value is None:
        try:
            value = config.getini("timeout")
        except ValueError:
            value = None
    try:
        return max(float(value), 0.0) if value not in (None, "") else 0.0
    except (TypeError, ValueError):
        return 0.0


def seconds_for(item: Any, set_s: float | None, entries: Callable[[], list[Any]]) -> float:
    """A test's deadline: set_s (its marker, else the run's setting), or unset one derived from its blessed entries
    (from_blessed); no later than pytest-timeout's limit when one is set. 0: none."""
    seconds = from_blessed(entries()) if set_s is None else set_s
    return within_timeout(seconds, timeout_limit(item))


def within_timeout(seconds: float, limit: float) -> float:
    """speedgate's deadline, no later than pytest-timeout's limit when one is set (0 for none on either side)."""
    if not limit:
        return seconds
    return min(seconds, limit) if seconds else limit


def faulthandler_timeout(config: Any) -> float:
    """pytest's faulthandler_timeout (0: unset): when set, it keeps faulthandler's one timer of the process."""
    try:
        return float(config.getini("faulthandler_timeout") or 0)
    except (ValueError, TypeError):
        return 0.0


def watchdog_for(config: Any, stderr_fd: int, payload: Callable[[], str]) -> Watchdog:
    """A process's watchdog: in an xdist worker its story goes to the side file the controller reads, with the
    worker's results (payload); faulthandler's timer backs it up unless pytest's faulthandler_timeout has it."""
    workerinput = getattr(config, "workerinput", None)
    side = side_file(workerinput["testrunuid"], workerinput["workerid"]) if workerinput else None
    return Watchdog(stderr_fd, side, backstop=not faulthandler_timeout(config), payload=payload)


@contextlib.contextmanager
def armed(watchdog: Watchdog, nodeid: str, seconds: float, ledger: RunLedger) -> Iterator[None]:
    """A test under its deadline: every result it records restarts the clock."""
    watchdog.arm(nodeid, seconds)
    ledger.progress = watchdog.progress
    try:
        yield
    finally:
        ledger.progress = None
        watchdog.disarm()


__all__ = ["EXIT_DEADLINE", "HOW_TO_CHANGE", "MARKER", "Watchdog", "armed", "backstop_grace", "crash_story",
           "faulthandler_timeout", "from_blessed", "marked_seconds", "payload_file", "seconds_for", "side_file", "timeout_limit",
           "watchdog_for", "within_timeout"]
