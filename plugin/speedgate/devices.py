"""Which device a process times on: one GPU per xdist worker when pinning is on, a lock where workers must share
one, and who else wanted the CPU while the host clock timed (CpuContention)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .hardware import visible_gpu_tokens

if TYPE_CHECKING:
    from filelock import FileLock


@dataclass(frozen=True)
class Assignment:
    """The device a worker times on; shared when more workers than devices run, so timing must be serialised."""

    device: str  # a CUDA_VISIBLE_DEVICES entry, or "cpu"
    shared: bool
    workers: int
    devices: int
    pinned: bool = True  # False: CUDA_VISIBLE_DEVICES was left alone and every worker times on the first device


def assign(worker_index: int, worker_count: int, gpus: list[str]) -> Assignment:
    """Round-robin workers over the visible GPUs (or the one CPU when there is none)."""
    if not gpus:
        return Assignment("cpu", worker_count > 1, worker_count, 1)
    return Assignment(gpus[worker_index % len(gpus)], worker_count > len(gpus), worker_count, len(gpus))


def started_by_xdist() -> bool:
    """Whether this process's pytest runs inside an xdist worker. Its PYTEST_XDIST_* variables alone do not say so: a
    pytest started as a subprocess from a worker's test inherits them, and took itself for that worker (a run with
    -n 2 inside it pinned its controller to the outer worker's GPU, so its own workers shared one). xdist runs a
    worker's whole session from its remote module, executed as '__channelexec__': that frame is on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "__channelexec__":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def worker_from_env() -> tuple[int, int] | None:
    """(index, count) of this xdist worker from the variables xdist sets before pytest starts in it; None outside
    a worker (started_by_xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or not count.isdigit() or not started_by_xdist():
        return None
    return int(worker[2:]), int(count)


def unpinned_worker() -> Assignment | None:
    """In an xdist worker whose GPUs were not pinned: every worker times on the first visible device (CUDA's default),
    shared when there are two workers or more. Asks NVML only when CUDA_VISIBLE_DEVICES is unset."""
    worker = worker_from_env()
    if worker is None:
        return None
    gpus = visible_gpu_tokens()
    return Assignment(gpus[0] if gpus else "cpu", worker[1] > 1, worker[1], max(len(gpus), 1), pinned=False)


def pin_worker() -> Assignment | None:
    """In an xdist worker, narrow CUDA_VISIBLE_DEVICES to this worker's GPU. Must run before CUDA starts."""
    worker = worker_from_env()
    if worker is None:
        return None
    assignment = assign(worker[0], worker[1], visible_gpu_tokens())
    if assignment.device != "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = assignment.device
    return assignment


# One FileLock per lock file in this process. flock belongs to an open file, so a second FileLock on the same path
# would wait for the first in the same thread: a pytester run in-process inside an xdist worker (it inherits
# PYTEST_XDIST_WORKER) takes its device's lock while the outer test holds it. A shared FileLock counts nested
# acquires per thread instead; other threads and processes still wait.
_LOCKS: dict[str, FileLock] = {}
_LOCKS_GUARD = threading.Lock()


def _file_lock(path: Path) -> FileLock:
    # filelock, not fcntl: fcntl does not exist on Windows (filelock uses flock on Unix, msvcrt locking on
    # Windows). Imported here: only a test that times on a shared device needs it.
    from filelock import FileLock

    with _LOCKS_GUARD:
        if str(path) not in _LOCKS:
            try:  # waits without a limit, as flock(LOCK_EX) did; a file every user of the machine can open
                _LOCKS[str(path)] = FileLock(str(path), mode=0o666)
            except TypeError:  # a filelock before 3.10 has no mode
                _LOCKS[str(path)] = FileLock(str(path))
        return _LOCKS[str(path)]


def shared_folder(folder: Path) -> Path:
    """The locks' folder, made where missing and opened where this user owns it, so that every user of the machine
    can add to it (mode 1777, as /tmp is): made 0755 by one user's run, it refused every other user's runs their
    locks."""
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
    _share(folder, 0o1777)
    return folder


def _share(path: Path, mode: int) -> None:
    """Give a locks' folder or lock file that this user owns the mode every user needs (one an older speedgate made
    0755 or 0644 included); another user's is theirs to set."""
    uid = getattr(os, "getuid", None)  # Windows has no owners' modes to set
    with contextlib.suppress(OSError):
        info = path.stat()
        if uid is not None and info.st_uid == uid() and info.st_mode & 0o7777 != mode:
            path.chmod(mode)


WAIT_PATIENCE_S = 1.0  # a wait longer than this is said: a turn of this run's own workers is usually shorter


@functools.cache
def lock_name(device: str) -> str:
    """What a device's lock is named by: a GPU's UUID (NVML's, asked once per process), so that runs that spell one
    GPU differently in CUDA_VISIBLE_DEVICES (its index in one, its UUID in another) take turns on one lock; the
    token itself where NVML gives no UUID; "cpu" for the CPU."""
    if device == "cpu":
        return device
    from .hardware import gpu_uuid

    return gpu_uuid(device) or device


class DeviceLock:
    """An advisory file lock per device, held while a test that times on a shared device runs.

    Workers that share a GPU (or the CPU) take turns: while one measures, no other worker's kernels run
    on that device. Re-entrant within a thread (each acquire needs its release); released by the OS if the
    process dies. Whoever holds it writes who it is (pid, run, project, test) into a side file, so that a run that
    waits on another run's hold can say whom it waits for.
    """

    def __init__(self, device: str, folder: Path | None = None) -> None:
        folder = shared_folder(folder or Path(tempfile.gettempdir()) / "speedgate-locks")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in lock_name(device))
        self.device = device
        self.path = folder / f"{safe}.lock"
        self.holder_path = folder / f"{safe}.holder.json"
        self._lock = _file_lock(self.path)
        _share(self.path, 0o666)  # made by filelock with its mode, or by an older speedgate with 0644

    def acquire(self, holder: Mapping[str, Any] | None = None, on_wait: Callable[[str], None] | None = None,
                patience_s: float = WAIT_PATIENCE_S) -> None:
        """Take the lock, waiting as long as it takes. holder: who takes it (see holder_record), written for others
        to read. on_wait: told, once the wait passed patience_s, whom this process waits for, and again once it has
        the lock; only when the holder is another run (this run's workers take turns by design)."""
        from filelock import Timeout

        if on_wait is None:
            self._lock.acquire()
        else:
            started = time.monotonic()
            try:
                self._lock.acquire(timeout=patience_s)
            except Timeout:
                words = waiting_words(self.device, self.path, self.holder(), holder)
                if words:
                    on_wait(words)
                self._lock.acquire()
                if words:
                    on_wait(f"speedgate: {_waiter(holder)}got {self.device} after waiting "
                            f"{time.monotonic() - started:.1f} s for another run")
        if holder is not None and self._lock.lock_counter == 1:  # the outermost hold says who holds it
            with contextlib.suppress(OSError):  # who holds it is told where it can be (another user's file stays)
                _write_json(self.holder_path, {**holder, "since": time.time()})

    def release(self) -> None:
        if self._lock.lock_counter == 1:
            with contextlib.suppress(OSError):
                self.holder_path.unlink(missing_ok=True)
        self._lock.release()

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock, as its holder wrote it; None when no holder said (or it is being replaced)."""
        try:
            record = json.loads(self.holder_path.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None


def holder_record(project: str, test: str) -> dict[str, Any]:
    """Who takes a device lock: this process, its run (xdist's run id, shared by the run's workers), the project's
    folder and the test."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") if worker else None
    return {"pid": os.getpid(), "run": run or f"pid-{os.getpid()}", "worker": worker, "project": project, "test": test}


def waiting_words(device: str, path: Path, held_by: Mapping[str, Any] | None, me: Mapping[str, Any] | None) -> str | None:
    """The line a process waiting on a device lock prints; None when the holder is this same run."""
    if held_by is not None and me is not None and held_by.get("run") == me.get("run"):
        return None
    if held_by is None:
        who = "a process that did not say who it is (an older speedgate, or one just taking it)"
    else:
        since = max(0.0, time.time() - float(held_by.get("since", time.time())))
        worker = f", worker {held_by['worker']}" if held_by.get("worker") else ""
        who = (f"pid {held_by.get('pid')}{worker} for {since:.0f} s, project {held_by.get('project')}, "
               f"test {held_by.get('test')}")
    return (f"speedgate: {_waiter(me)}waiting for {device}: another run holds its lock ({path}): {who}. Runs on one "
            "device take turns, a whole test at a time; this one goes on when the device is free (a run that takes "
            "its next test at once may keep it to its end)")


def _waiter(me: Mapping[str, Any] | None) -> str:
    """'gw1 ' for an xdist worker that waits (a run's workers each say their own wait), else ''."""
    return f"{me['worker']} " if me and me.get("worker") else ""


def _write_json(path: Path, record: Mapping[str, Any]) -> None:
    """Whole or not at all: a reader never sees half a record."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, sort_keys=True))
    os.replace(partial, path)


def involuntary_switches() -> int | None:
    """How often the scheduler has taken the CPU away from this process (all its threads) because something else
    wanted it; None where getrusage does not exist (Windows). Waiting by choice (sleep, I/O) does not count."""
    try:
        import resource
    except ImportError:
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)


def usable_cores() -> int:
    sched_getaffinity = getattr(os, "sched_getaffinity", None)
    return len(sched_getaffinity(0)) if sched_getaffinity else (os.cpu_count() or 1)


# A host whose 1-minute load average is over this share of its usable cores is said to be busy beside a verdict that
# did not pass (busy_host): its launches, and a launch-bound side's time, wait for the CPU.
BUSY_LOAD_SHARE = 0.5


def host_state() -> dict[str, Any]:
    """The host's 1-minute load average now (None where the platform has none) and the cores this process may use:
    recorded with each verdict, so that a reader can see the host was busy (another xdist worker's compile) when a
    side bound by the host's launches moved."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"host_load": None if load is None else round(load, 2), "host_cores": usable_cores()}


def busy(load: Any, cores: Any) -> bool:
    """Whether a recorded load average (host_state's) is over BUSY_LOAD_SHARE of the usable cores; False where either
    is unknown."""
    return isinstance(load, (int, float)) and isinstance(cores, int) and cores > 0 and load > BUSY_LOAD_SHARE * cores


def busy_host(load: float | None, cores: int | None) -> str | None:
    """Words for a host whose load average exceeded half its usable cores when a verdict was given, else None."""
    return f"the host's load average was {load:.1f} on {cores} cores when it was measured" if busy(load, cores) else None


# Contention that spoils a comparison shows in its samples as a median call far above the fastest one (with torch's
# threads, one waits for its descheduled sibling in most calls; single-threaded work keeps its median). It is tied to
# the scheduler by the share of timed calls during which the process lost the CPU (involuntary context switches), so
# that work whose time truly varies is not blamed on the machine.
SLOW_MEDIAN = 3.0  # median call / fastest call of one side
PREEMPTED_SHARE = 0.10
MIN_SAMPLES = 20


@dataclass
class CpuContention:
    """What the host clock's timed calls saw of the CPU's other users: how many were preempted, and the load."""

    samples: int = 0
    preempted: int = 0  # timed calls during which the process lost the CPU at least once
    switches: int = 0  # involuntary context switches across them
    load: float = 0.0  # the highest 1-minute load average seen after a batch of calls
    cores: int = 0
    threads: int = 1  # torch's intra-op threads when the run ended (1 without torch)
    clocks: list[str] = field(default_factory=list)  # the labels of the clocks whose timed calls these are

    def batch(self, switches_per_call: Sequence[int]) -> None:
        """The involuntary switches during each call of one batch of timed calls."""
        self.samples += len(switches_per_call)
        self.preempted += sum(1 for n in switches_per_call if n > 0)
        self.switches += sum(switches_per_call)
        if hasattr(os, "getloadavg"):
            self.load = max(self.load, os.getloadavg()[0])
        self.cores = self.cores or usable_cores()

    def add(self, other: CpuContention) -> None:
        """Another process's counts (an xdist worker's)."""
        self.samples += other.samples
        self.preempted += other.preempted
        self.switches += other.switches
        self.load = max(self.load, other.load)
        self.cores = max(self.cores, other.cores)
        self.threads = max(self.threads, other.threads)
        self.clocks = sorted({*self.clocks, *other.clocks})

    def words(self, slowed: Sequence[tuple[str, str, float, float]]) -> str | None:
        """The warning when the timing was contended; None when it was not (or too few calls to tell). slowed: the
        (case, side, median ms, fastest ms) of host-clock sides whose median call took SLOW_MEDIAN times their fastest."""
        if not slowed or self.samples < MIN_SAMPLES or self.preempted < PREEMPTED_SHARE * self.samples:
            return None
        case, side, median_ms, fastest_ms = max(slowed, key=lambda s: s[2] / s[3])
        load = f"; load average {self.load:.1f} on {self.cores} cores" if self.load else ""
        threads = f"; torch ran {self.threads} threads" if self.threads > 1 else ""
        return (f"CPU timing was contended: {len(slowed)} timed sides' median call took {SLOW_MEDIAN:g}x their fastest "
                f"or more ({case}'s {side}: {median_ms:.4g} ms against {fastest_ms:.4g} ms), and the timing process "
                f"lost the CPU during {self.preempted} of {self.samples} timed calls ({self.preempted / self.samples:.0%}; "
                f"{self.switches} involuntary context switches{load}{threads}): the times measure the other load as "
                "much as the work, and a speedup may read near 1.0x whatever the code does. Run with one thread "
                "(torch.set_num_threads(1), OMP_NUM_THREADS=1), or on a quiet machine")


def slowed_sides(results: Iterable[Any], clocks: Collection[str]) -> list[tuple[str, str, float, float]]:
    """(case, side, median ms, fastest ms) of the sides timed by one of these clocks (the labels results carry, those
    of CpuContention.clocks) whose median call took SLOW_MEDIAN times their fastest or more (results: CompareResults,
    with each side's sample statistics in seconds)."""
    slowed = []
    for result in results:
        if getattr(result, "timer", None) not in clocks:
            continue
        for side in ("reference", "optimized"):
            stats = getattr(result, f"{side}_stats", None) or {}
            fastest, median = stats.get("min"), stats.get("median")
            if fastest and median and int(stats.get("rounds", 0)) >= MIN_SAMPLES and median >= SLOW_MEDIAN * fastest:
                slowed.append((result.case_id, side, 1e3 * float(median), 1e3 * float(fastest)))
    return slowed
