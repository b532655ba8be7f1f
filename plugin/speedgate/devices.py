"""Which device a process times on: one GPU per xdist worker, and a lock where workers must share one."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# filelock, not fcntl: this module is imported whenever the plugin loads (every pytest run where it is installed),
# and fcntl does not exist on Windows. filelock uses flock on Unix and msvcrt locking on Windows.
from filelock import FileLock

from .hardware import visible_gpu_tokens


@dataclass(frozen=True)
class Assignment:
    """The device a worker times on; shared when more workers than devices run, so timing must be serialised."""

    device: str  # a CUDA_VISIBLE_DEVICES entry, or "cpu"
    shared: bool
    workers: int
    devices: int


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


def pin_worker() -> Assignment | None:
    """In an xdist worker, narrow CUDA_VISIBLE_DEVICES to this worker's GPU. Must run before CUDA starts."""
    worker = worker_from_env()
    if worker is None:
        return None
    assignment = assign(worker[0], worker[1], visible_gpu_tokens())
    if assignment.device != "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = assignment.device
    return assignment


class DeviceLock:
    """An advisory file lock per device, held while a test that times on a shared device runs.

    Workers that share a GPU (or the CPU) take turns: while one measures, no other worker's kernels run
    on that device. Released by the OS if the process dies.
    """

    def __init__(self, device: str, folder: Path | None = None) -> None:
        folder = folder or Path(tempfile.gettempdir()) / "speedgate-locks"
        folder.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device)
        self.path = folder / f"{safe}.lock"
        self._lock = FileLock(str(self.path))  # waits without a limit, as flock(LOCK_EX) did

    def acquire(self) -> None:
        # Idempotent, as before: FileLock counts nested acquires, this lock does not.
        if not self._lock.is_locked:
            self._lock.acquire()

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release()
