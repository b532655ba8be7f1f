"""Which device a process times on: one GPU per xdist worker when pinning is on, and a lock where workers must share
one."""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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


def worker_from_env() -> tuple[int, int] | None:
    """(index, count) of this xdist worker from the variables xdist sets before pytest starts in it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or not count.isdigit():
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
            _LOCKS[str(path)] = FileLock(str(path))  # waits without a limit, as flock(LOCK_EX) did
        return _LOCKS[str(path)]


class DeviceLock:
    """An advisory file lock per device, held while a test that times on a shared device runs.

    Workers that share a GPU (or the CPU) take turns: while one measures, no other worker's kernels run
    on that device. Re-entrant within a thread (each acquire needs its release); released by the OS if the
    process dies.
    """

    def __init__(self, device: str, folder: Path | None = None) -> None:
        folder = folder or Path(tempfile.gettempdir()) / "speedgate-locks"
        folder.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device)
        self.path = folder / f"{safe}.lock"
        self._lock = _file_lock(self.path)

    def acquire(self) -> None:
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()
