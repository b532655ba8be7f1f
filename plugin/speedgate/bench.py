"""The bench: what this process times on and with. The machine's fingerprint and hardware key, the timer (made once),
the GPU's monitor and its cooling, the ceilings and the roofline, the device's turn among xdist workers, and the host
clock's contention; what it does around a timer follows from what the timer can do, never from its name."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .hardware import Fingerprint, detect, multi_gpu_key, visible_gpu_tokens

# Made when a test asks for perf, and at the end of every xdist worker; what only timing or the GPU needs is imported
# where it is used, so a worker that never timed does not load it.
if TYPE_CHECKING:
    from .ceilings import Ceilings
    from .devices import Assignment, CpuContention
    from .gpu_state import Monitor
    from .results import CompareResult
    from .timers import Timer, TimerKind


class Bench:
    """One process's machine and clock. hardware_key: the key asked for (None: detected); timer_kind: the kind of clock
    (--speedgate-timer); make_timer: what makes a clock of a kind (the pytest_speedgate_make_timer hook; None:
    speedgate's own factory); assignment: a pinned xdist worker's device (else looked up at the first device turn)."""

    def __init__(self, hardware_key: str | None, timer_kind: str, assignment: Assignment | None = None,
                 make_timer: Callable[[TimerKind], Timer] | None = None) -> None:
        self._asked_key = hardware_key
        self._timer_kind = timer_kind
        self._make_timer = make_timer
        self._assignment = assignment
        self._assignment_known = assignment is not None
        self._fingerprint: Fingerprint | None = None
        self._gpu_counts: dict[str, int] = {}  # multi-GPU hardware key -> its GPU count
        self._timer: Timer | None = None
        self.monitor: Monitor | None = None
        self.gpu_state_at_start: dict[str, str] = {}
        self._ceilings: Ceilings | None = None
        self.ceilings_seen: dict[str, dict[str, Any]] = {}
        self._absorbed_contention: list[CpuContention] = []  # xdist workers' CPU contention counts
        self.workers: dict[str, dict[str, Any]] = {}  # xdist worker id -> the device it timed on
        self._toolchain_settled = False
        self._lock_refusal_said = False  # said once: a device lock this user could not take
        # Why this test may not run: the lock of a device this run's xdist workers share could not be taken (they
        # would time over each other); the test's setup fails with it (set at each device turn).
        self.lock_refused: str | None = None

    # -- the machine ---------------------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            self._fingerprint = detect(self._asked_key)
        return self._fingerprint

    @property
    def hardware_key(self) -> str:
        return self.fingerprint.key

    def multi_gpu_key(self, world_size: int) -> str:
        """The hardware key of results measured across world_size GPUs of this machine ('2x-nvidia-h200'); its
        fingerprint is this one's with the GPU count."""
        key = multi_gpu_key(self.hardware_key, world_size)
        self._gpu_counts[key] = world_size
        return key

    def fingerprint_of(self, key: str) -> dict[str, Any]:
        """The fingerprint a result filed under key carries: the latest view, not the first (the timer adds what NVML
        cannot tell, SM count and L2, when it is made, which can be after a test recorded a metric)."""
        fp = self.fingerprint.to_json()
        if key in self._gpu_counts:
            fp["hardware"]["gpu_count"] = self._gpu_counts[key]
        return fp

    def card(self) -> str | None:
        """The anonymized identity of the card this process times on (None on the CPU)."""
        return self.fingerprint.card

    def software(self) -> dict[str, Any]:
        """The software versions of this run's fingerprint."""
        return dict(self.fingerprint.software)

    # -- the clock -----------------------------------------------------------------------------------------------
    def timer(self) -> Timer:
        if self._timer is None:
            from .measure import warm_statistics
            from .timers import TimerKind, as_timer, make_timer

            warm_statistics()
            self._timer = as_timer((self._make_timer or make_timer)(TimerKind(self._timer_kind)))
            if self._timer.on_gpu:  # its GPU's state is watched, and it cools before timing begins
                self._watch_gpu()
            # What NVML does not report (SM count, L2) the CUDA timer read off the device: keep it.
            for name, value in self._timer.properties.items():
                self.fingerprint.hardware.setdefault(name, value)
        return self._timer

    def _watch_gpu(self) -> None:
        from .gpu_state import open_monitor, wait_until_cool

        tokens = visible_gpu_tokens()
        self.monitor = open_monitor(tokens[0] if tokens else "0")
        if self.monitor is not None:
            cooling = wait_until_cool(self.monitor.read)
            state = (cooling.after if cooling else self.monitor.read()).describe()
            self.gpu_state_at_start[self.hardware_key] = f"{state} ({cooling.describe()})" if cooling else state

    def roofline(
        self, timer: Timer, flops: float | None, nbytes: float | None, flops_dtype: str | None
    ) -> tuple[float, str, str] | None:
        """(floor ms, bound, the ceiling in words) of the declared work on this run's measured ceilings, for a timer
        on the GPU; None elsewhere or with no work declared."""
        from .ceilings import Ceilings, measure_copy_gbps, measure_matmul_tflops

        if not timer.on_gpu or not (flops or nbytes):
            return None
        import torch

        if self._ceilings is None:
            self._ceilings = Ceilings(copy_gbps=measure_copy_gbps(torch))
        if flops and flops_dtype and flops_dtype not in self._ceilings.matmul_tflops:
            self._ceilings.matmul_tflops[flops_dtype] = measure_matmul_tflops(torch, flops_dtype)
        floor = self._ceilings.floor_ms(flops, nbytes, flops_dtype)
        if floor is None:
            return None
        self.ceilings_seen[self.hardware_key] = self._ceilings.to_json()
        floor_ms, bound = floor
        if bound == "compute" and flops_dtype:
            ceiling = f"{flops_dtype} matmul {self._ceilings.matmul_tflops.get(flops_dtype, 0):.0f} TFLOP/s"
        else:
            ceiling = f"copy {self._ceilings.copy_gbps:.0f} GB/s"
        return floor_ms, bound, ceiling

    # -- the toolchain -------------------------------------------------------------------------------------------
    def settle_toolchain(self) -> None:
        """Once a process, at its first test where the run has tests that use perf: one ptxas for every Triton kernel
        it compiles, its binaries in a folder of that ptxas's own (speedgate.toolchain), its version among the run's
        software, so that a kernel's changed facts name it when it moved. The GPU's target is asked of NVML, not of a
        worker's device turn. Nothing on a process that sees no GPU."""
        if self._toolchain_settled:
            return
        self._toolchain_settled = True
        from .toolchain import settle_for_visible_gpu

        settled = settle_for_visible_gpu()
        if settled is not None and settled.version:
            self.fingerprint.software["ptxas"] = settled.version

    # -- the device's turn ---------------------------------------------------------------------------------------
    @property
    def assignment(self) -> Assignment | None:
        """The device this xdist worker times on (None outside xdist): pinned at start-up, or, when pinning is off,
        the first visible device, shared by every worker (looked up once, by the first test that uses perf)."""
        if not self._assignment_known:
            from .devices import unpinned_worker

            self._assignment, self._assignment_known = unpinned_worker(), True
        return self._assignment

    @contextlib.contextmanager
    def device_turn(self, nodeid: str = "", project: Path | None = None,
                    on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the lock of the device this process times on for a whole test, so that no other timing process
        runs on it meanwhile: xdist workers that share it, and other runs on the machine (two blesses at once, two CI
        jobs on one GPU), take turns.

        A whole test, not only its timed loop: another process's untimed kernels (its correctness check, its
        warm-up) on the same GPU would corrupt this one's samples just as well, and on the CPU two timing processes
        inflated each other's speedups with no warning (docs/running.md). The lock says who holds it (nodeid,
        project); on_wait is told whom this test waits for when another run holds it for over a second.
        """
        from .devices import DeviceLock, holder_record

        assignment = self.assignment
        device = assignment.device if assignment is not None else self.own_device
        self.lock_refused = None
        lock: DeviceLock | None = None
        try:
            lock = DeviceLock(device)
            lock.acquire(holder_record(str(project or ""), nodeid), on_wait)
        except OSError as exc:
            lock = None
            if assignment is not None and assignment.shared:  # this run's own workers would time over each other
                self.lock_refused = (f"speedgate: cannot take the lock of {device}, which this run's xdist workers "
                                     f"share ({exc}); speedgate keeps its locks in $TMPDIR/speedgate-locks: set TMPDIR "
                                     "to a folder this user can write")
            elif not self._lock_refusal_said and on_wait is not None:
                on_wait(f"speedgate: cannot take the lock of {device} ({exc}): this run times without taking turns "
                        "with other runs on it; speedgate keeps its locks in $TMPDIR/speedgate-locks: set TMPDIR to a "
                        "folder this user can write")
            self._lock_refusal_said = True
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    @functools.cached_property
    def own_device(self) -> str:
        """The device a process outside xdist times on: the first visible GPU (CUDA's default), else the CPU; looked
        up once (without CUDA_VISIBLE_DEVICES, NVML is asked), not at every test's turn."""
        gpus = visible_gpu_tokens()
        return gpus[0] if gpus else "cpu"

    def worker_device(self) -> dict[str, Any] | None:
        """This xdist worker's device, for the controller; None when no test asked for it (nothing was looked up)."""
        if self._assignment is None:
            return None
        return {"id": os.environ.get("PYTEST_XDIST_WORKER", "?"), "device": self._assignment.device,
                "shared": self._assignment.shared, "pinned": self._assignment.pinned}

    # -- the host clock's contention -----------------------------------------------------------------------------
    def own_contention(self) -> dict[str, Any] | None:
        """This process's host-clock contention counts (None when it timed nothing with a clock that counts them)."""
        contention = getattr(self._timer, "contention", None)
        if contention is None or not contention.samples:
            return None
        torch = sys.modules.get("torch")
        if torch is not None:
            contention.threads = int(torch.get_num_threads())
        return dataclasses.asdict(contention)

    def contention_warning(self, records: Iterable[CompareResult]) -> str | None:
        """The warning when the host clock's timed calls, in this process or any xdist worker, were contended."""
        from .devices import CpuContention, slowed_sides

        own = self.own_contention()
        total = CpuContention()
        for counts in ([CpuContention(**own)] if own else []) + self._absorbed_contention:
            total.add(counts)
        return total.words(slowed_sides(records, total.clocks))

    # -- xdist ---------------------------------------------------------------------------------------------------
    def absorb(self, ceilings: Mapping[str, dict[str, Any]], gpu_state: Mapping[str, str],
               contention: Mapping[str, Any] | None, worker: Mapping[str, Any] | None) -> None:
        """An xdist worker's part: its ceilings and GPU state (the first worker's per key), its contention counts, and
        the device it timed on."""
        for key, seen in ceilings.items():
            self.ceilings_seen.setdefault(key, dict(seen))
        for key, state in gpu_state.items():
            self.gpu_state_at_start.setdefault(key, state)
        if contention:
            from .devices import CpuContention

            self._absorbed_contention.append(CpuContention(**contention))
        if worker:
            self.workers[worker["id"]] = {"device": worker["device"], "shared": worker["shared"],
                                          "pinned": worker["pinned"]}


__all__ = ["Bench"]
