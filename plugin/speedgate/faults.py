"""CUDA faults inside a test: which errors poison the process's CUDA context and which only ran out of memory, and
what the run does after one (end the xdist worker so a fresh one runs the rest, or stop later perf cases); and
speedgate's own deadline, which ends and names a test that hangs (Watchdog).

A sticky error (an illegal memory access, a device-side assert, ...) leaves the process's CUDA context unusable:
every later CUDA call in it fails with the same error, so later cases would fail blaming themselves. Under xdist the
worker ends right after the culprit's report is sent, and xdist starts a fresh worker (a clean context) for the
rest; in a serial run the later cases that use `perf` fail at setup naming the culprit. Out of memory is
recoverable: the failed test's frames are dropped and the allocator's cache emptied after it.

A kernel that never finishes leaves the host waiting inside a CUDA call (a synchronize, a copy) that never returns
to Python, so nothing raised in the test's thread can end it. A watchdog thread can (Watchdog): CUDA's waits release
the GIL. When the deadline passes it writes which test hung (and since when) and the stacks of every thread, and ends
the process with os._exit. Serially that ends the run; under xdist it ends the worker, xdist names the test in its
crash report (the controller adds what the watchdog wrote, see crash_story, and keeps the results it saved) and starts
a fresh worker for the rest. A C call that keeps the GIL would starve the watchdog: faulthandler's own timer (a C
thread, no GIL) then dumps the stacks and exits a little later, unless pytest's faulthandler_timeout already uses
that one timer of the process. The clock restarts whenever a comparison of the test finishes (progress), so the
deadline is per comparison: a test with many slow comparisons is not cut short by their sum.

Imports neither pytest nor torch: torch is looked up in sys.modules, never imported; hook objects are duck-typed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn


class FaultKind(str, Enum):
    POISONED = "poisoned"  # a sticky CUDA error: the context is unusable for the rest of the process
    OUT_OF_MEMORY = "out-of-memory"  # recoverable once what the test held is freed


# The errors after which the CUDA runtime documents that "the process must be terminated and relaunched": each as
# cudaGetErrorString prints it (torch: "CUDA error: <text>"; Triton: "Triton Error [CUDA]: <text>") and the runtime
# and driver names torch and Triton print beside it ("Search for `cudaErrorIllegalAddress' ...").
_STICKY = (
    ("an illegal memory access was encountered", "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("an illegal instruction was encountered", "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    ("misaligned address", "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS"),
    ("operation not supported on global/shared address space", "cudaErrorInvalidAddressSpace",
     "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    ("invalid program counter", "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC"),
    ("unspecified launch failure", "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED"),
    ("device-side assert triggered", "cudaErrorAssert", "CUDA_ERROR_ASSERT"),
    ("hardware stack error", "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    ("the launch timed out and was terminated", "cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT"),
    ("uncorrectable ECC error encountered", "cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE"),
)
_STICKY_MARKS = tuple(mark.lower() for marks in _STICKY for mark in marks)
# torch.OutOfMemoryError ("CUDA out of memory. Tried to allocate ..."), a raw cudaMalloc failure as torch or Triton
# print it ("CUDA error: out of memory", "Triton Error [CUDA]: out of memory").
_OOM_MARKS = ("outofmemoryerror", "cuda out of memory", "cuda error: out of memory", "[cuda]: out of memory",
              "cudaerrormemoryallocation", "cuda_error_out_of_memory")
EXIT_POISONED = 70  # the exit status of a worker ended after a sticky error (EX_SOFTWARE); xdist only sees a crash


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    error: str  # the error's first line, 'AcceleratorError: CUDA error: an illegal memory access was encountered'

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "error": self.error}


def classify_text(text: str) -> FaultKind | None:
    """What an error's text says about the CUDA context: POISONED, OUT_OF_MEMORY, or None (anything else)."""
    low = text.lower()
    if any(mark in low for mark in _STICKY_MARKS):
        return FaultKind.POISONED  # first: a sticky error can mention memory too, and it is the worse news
    if any(mark in low for mark in _OOM_MARKS):
        return FaultKind.OUT_OF_MEMORY
    return None


def classify(exc: BaseException | None) -> Fault | None:
    """The CUDA fault an exception carries, itself or down its chain (perf.compare wraps a callable's error in a
    CaseError; torch.compile in its own). Only RuntimeErrors count (torch's AcceleratorError and OutOfMemoryError,
    Triton's driver errors are): an AssertionError that quotes another process's CUDA error (a rank's traceback)
    says nothing about this process's context."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RuntimeError):
            text = f"{type(exc).__name__}: {exc}"
            kind = classify_text(text)
            if kind is not None:
                return Fault(kind, text.strip().splitlines()[0])
        exc = exc.__cause__ or exc.__context__
    return None


def synchronize_cuda() -> None:
    """Wait for the GPU work a test queued, so that an asynchronous fault (an illegal access in its last kernel) fails
    that test and not the next one. A no-op when this process never started CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def release_cuda_memory() -> None:
    """After an out-of-memory failure, free what the failed test still holds so the next case starts with its memory."""
    # pytest keeps the failure in sys.last_* for post-mortem debugging (done by now): its frames hold the test's tensors.
    for name in ("last_exc", "last_type", "last_value", "last_traceback"):
        with contextlib.suppress(AttributeError):
            delattr(sys, name)
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class FaultWatch:
    """One process's view: the first test that poisoned its CUDA context, and the tests whose memory to release."""

    def __init__(self, worker: str | None = None) -> None:
        self.worker = worker  # the xdist worker id ('gw0'); None in a serial run (or the xdist controller)
        self.culprit: tuple[str, Fault] | None = None
        self._out_of_memory: set[str] = set()

    def after_report(self, nodeid: str, rep: Any, excinfo: Any, payload: Callable[[], str] | None = None) -> Fault | None:
        """From a phase's report (and its ExceptionInfo): note a fault, explain it in a report section and, in an xdist
        worker, mark the report so this worker ends once it is sent (payload: the worker's results, which would die
        with it, ride on the report). At the teardown of a test that ran out of memory, release the memory."""
        if rep.when == "teardown" and nodeid in self._out_of_memory:
            self._out_of_memory.discard(nodeid)
            release_cuda_memory()
        fault = classify(excinfo.value) if rep.failed and excinfo is not None else None
        if fault is None:
            return None
        if fault.kind is FaultKind.OUT_OF_MEMORY:
            self._out_of_memory.add(nodeid)
            rep.sections.append(("speedgate", "out of memory: the CUDA cache is emptied after this test, so the next "
                                              "case starts with the memory free"))
            return fault
        if self.culprit is None:
            self.culprit = (nodeid, fault)
        if self.worker is None:
            rep.sections.append(("speedgate", f"{fault.error}: this process's CUDA context is unusable from here on; "
                                              "the later cases that use perf are not run. Run under xdist (-n 1 or "
                                              "more): a fresh worker then runs them."))
        else:
            rep.sections.append(("speedgate", f"{fault.error}: this worker's CUDA context is unusable from here on; "
                                              f"xdist worker {self.worker} ends after this test and xdist starts a "
                                              "fresh one for the tests after it (at most --max-worker-restart times)."))
            rep.speedgate_fault = fault.to_json()
            if payload is not None:
                rep.speedgate_payload = payload()
        return fault

    def end_if_poisoned(self, rep: Any) -> None:
        """In an xdist worker, once a report marked by after_report has been sent: end this process."""
        if self.worker is not None and getattr(rep, "speedgate_fault", None):
            end_worker(self.worker, rep.nodeid, rep.speedgate_fault["error"])

    def not_run(self) -> str | None:
        """Why a later case must not run in this process (None: it may run)."""
        if self.culprit is None:
            return None
        nodeid, fault = self.culprit
        return (f"not run: the CUDA context of this process was poisoned by {nodeid} ({fault.error}); every CUDA "
                "call here would fail with that error. Run under xdist (-n 1 starts a fresh worker after such a "
                "case), or re-run without the culprit.")


def end_worker(worker: str, nodeid: str, error: str) -> NoReturn:
    """End this xdist worker at once. xdist sees a crash while nodeid ran, and starts a fresh worker for the rest."""
    sys.stderr.write(f"\nspeedgate: ending xdist worker {worker}: {nodeid} poisoned its CUDA context ({error}); "
                     "xdist starts a fresh worker for the tests after it\n")
    sys.stderr.flush()
    sys.stdout.flush()
    # os._exit, not sys.exit: no teardown, finalizer or atexit handler may touch the poisoned context again.
    os._exit(EXIT_POISONED)


class WorkerCrashes:
    """The xdist controller's side: the tests whose worker speedgate ended, when each test started, and the crash
    report xdist writes for a worker that died (rewritten by explain)."""

    def __init__(self) -> None:
        self.ended: dict[str, dict[str, Any]] = {}  # nodeid -> its fault and where it ran (item_index, worker_id)
        self.started: dict[str, float] = {}  # nodeid -> time.monotonic() at its logstart

    def note_start(self, nodeid: str) -> None:
        self.started[nodeid] = time.monotonic()

    def note_report(self, rep: Any) -> str | None:
        """Remember a test whose worker ends after it; returns the worker's results that rode on its report."""
        fault = getattr(rep, "speedgate_fault", None)
        if not fault:
            return None
        self.ended[rep.nodeid] = {"fault": fault, "item_index": getattr(rep, "item_index", None),
                                  "worker_id": getattr(rep, "worker_id", None)}
        payload: str | None = getattr(rep, "speedgate_payload", None)
        return payload

    def explain(self, crashitem: str, report: Any, timeout_s: float | None, story: str | None = None) -> None:
        """Rewrite xdist's crash report (pytest_handlecrashitem) of the test a worker died in.

        A worker speedgate ended on purpose: the test already failed with its own error, so the crash report becomes
        that test's (passed) teardown report: counted once, and its JUnit testcase closed. A worker that died past
        pytest-timeout's limit: say so (the thread method's stack dump went to the worker's stdout, which xdist
        discards). A worker that speedgate's deadline ended: story is what its watchdog wrote (the test, the
        deadline, the stacks), or faulthandler's stacks when the watchdog could not run."""
        ended = self.ended.pop(crashitem, None)
        started = self.started.pop(crashitem, None)
        if ended is not None:
            report.outcome, report.when, report.longrepr = "passed", "teardown", None
            report.item_index, report.worker_id = ended["item_index"], ended["worker_id"]
            report.sections.append(("speedgate", f"worker ended after {ended['fault']['error']}; xdist replaced it"))
            return
        if story is not None:
            if not story.startswith("speedgate:"):  # faulthandler's timer, the deadline's backstop: stacks only
                story = ("speedgate: the test ran past its deadline and held the GIL, so faulthandler's timer ended the "
                         f"worker; its stacks:\n{story}")
            report.longrepr = f"{report.longrepr}\n{story}"
            return
        if started is None or not timeout_s:
            return
        elapsed = time.monotonic() - started
        # The controller hears of the start a little after the worker's timer starts: allow for that lag.
        if elapsed >= timeout_s - min(1.0, timeout_s / 10):
            report.longrepr = (f"{report.longrepr}\nspeedgate: it ran {elapsed:.0f} s, past pytest-timeout's per-test "
                               f"limit of {timeout_s:g} s: the case hung and pytest-timeout ended the worker (its stacks: "
                               "on stderr above when faulthandler_timeout is set a little below timeout)")


def timeout_setting(config: Any) -> float | None:
    """pytest-timeout's per-test limit for this run (--timeout, else PYTEST_TIMEOUT, else the ini's timeout), in
    seconds; None when it is unset or pytest-timeout is not installed. A @pytest.mark.timeout is not seen here."""
    if not config.pluginmanager.hasplugin("timeout"):
        return None
    for value in (config.getoption("timeout", None), os.environ.get("PYTEST_TIMEOUT"), config.getini("timeout")):
        if value not in (None, ""):
            try:
                return float(value) or None
            except ValueError:
                return None  # pytest-timeout itself reports a bad value
    return None


# -- the deadline ---------------------------------------------------------------------------------------------
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
        os.lseek(fd, 0, os.SEEK_END)
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


__all__ = ["EXIT_DEADLINE", "EXIT_POISONED", "HOW_TO_CHANGE", "Fault", "FaultKind", "FaultWatch", "Watchdog", "WorkerCrashes",
           "backstop_grace", "classify", "classify_text", "crash_story", "end_worker", "payload_file", "release_cuda_memory",
           "side_file", "synchronize_cuda", "timeout_setting"]
