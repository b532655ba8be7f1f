"""CUDA faults inside a test: which errors poison the process's CUDA context and which only ran out of memory, and
what the run does after one (end the xdist worker so a fresh one runs the rest, or stop later perf cases); and, on
the xdist controller, the crash report of a worker that died (speedgate ended it, pytest-timeout did, or its deadline:
speedgate.deadline).

A sticky error (an illegal memory access, a device-side assert, ...) leaves the process's CUDA context unusable:
every later CUDA call in it fails with the same error, so later cases would fail blaming themselves. Under xdist the
worker ends right after the culprit's report is sent, and xdist starts a fresh worker (a clean context) for the
rest; in a serial run the later cases that use `perf` fail at setup naming the culprit. Out of memory is
recoverable: the failed test's frames are dropped and the allocator's cache emptied after it.

Imports neither pytest nor torch: torch is looked up in sys.modules, never imported; hook objects are duck-typed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
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


__all__ = ["EXIT_POISONED", "Fault", "FaultKind", "FaultWatch", "WorkerCrashes", "classify", "classify_text", "end_worker",
           "release_cuda_memory", "synchronize_cuda", "timeout_setting"]
