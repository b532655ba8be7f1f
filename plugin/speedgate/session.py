"""One pytest run's speedgate state: fingerprint, baseline, timer, results, and the work at the end."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .hardware import Fingerprint, detect, multi_gpu_key, visible_gpu_tokens

# The plugin makes a session when a test asks for perf, and at the end of every xdist worker; what only timing, a
# baseline or the controller needs is imported where it is used, so a worker that never timed does not load it.
if TYPE_CHECKING:
    from .ceilings import Ceilings
    from .devices import Assignment
    from .gpu_state import Monitor
    from .options import Settings
    from .results import CompareResult, MetricResult
    from .timers import Timer


class SpeedgateSession:
    """One pytest run's state: what the fixture asks for (fingerprint, baselines, timer, ceilings) and what the run
    produced (typed results, test outcomes, fingerprints), merged across xdist workers."""

    def __init__(self, settings: Settings, assignment: Assignment | None = None) -> None:
        self.settings = settings
        self.assignment = assignment
        self._fingerprint: Fingerprint | None = None
        # Each hardware key's baseline document, read and validated once (None: no file); blessing replaces it.
        self.docs: dict[str, dict[str, Any] | None] = {}
        self._timer: Timer | None = None
        self.records: list[CompareResult] = []
        self.metric_records: list[MetricResult] = []
        self.failed_nodeids: set[str] = set()
        self.passed_nodeids: set[str] = set()  # tests whose call passed (a run cut short blesses only these)
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.used = False
        self._ceilings: Ceilings | None = None
        self.ceilings_seen: dict[str, dict[str, Any]] = {}
        self.monitor: Monitor | None = None
        self.gpu_state_at_start: dict[str, str] = {}
        self.workers: dict[str, dict[str, Any]] = {}  # xdist worker id -> the device it was pinned to
        self._gpu_counts: dict[str, int] = {}  # multi-GPU hardware key -> its GPU count

    # -- what the fixture asks for ---------------------------------------------------------------------------
    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            self._fingerprint = detect(self.settings.hardware_key)
        return self._fingerprint

    @property
    def hardware_key(self) -> str:
        return self.fingerprint.key

    @property
    def baseline_path(self) -> Path:
        return self.baseline_path_for(self.hardware_key)

    def baseline_path_for(self, key: str) -> Path:
        return self.settings.baseline_dir / f"{key}.json"

    def multi_gpu_key(self, world_size: int) -> str:
        """The hardware key of results measured across world_size GPUs of this machine ('2x-nvidia-h200'); its
        fingerprint is this one's with the GPU count."""
        key = multi_gpu_key(self.hardware_key, world_size)
        self._gpu_counts[key] = world_size
        return key

    def load_baseline(self) -> None:
        """Read and validate this hardware's baseline file once; BaselineError if it is unusable."""
        self.doc_for(self.hardware_key)

    def doc_for(self, key: str) -> dict[str, Any] | None:
        """The validated baseline document of key (None when there is no file), read once per run."""
        if key not in self.docs:
            from . import baseline as baseline_file

            self.docs[key] = baseline_file.read(self.baseline_path_for(key))
        return self.docs[key]

    @property
    def baseline_found(self) -> bool:
        return self.baseline_found_for(self.hardware_key)

    def baseline_found_for(self, key: str) -> bool:
        return self.doc_for(key) is not None

    def baseline_entry(self, case_id: str, key: str | None = None) -> dict[str, Any] | None:
        doc = self.doc_for(key or self.hardware_key)
        return None if doc is None else doc["cases"].get(case_id)

    def baseline_metric(self, metric_id: str) -> dict[str, Any] | None:
        doc = self.doc_for(self.hardware_key)
        return None if doc is None else doc.get("metrics", {}).get(metric_id)

    def record_metric(self, result: MetricResult) -> None:
        self.used = True
        self.metric_records.append(result)
        self._note_fingerprint(result.hardware_key)

    def timer(self) -> Timer:
        if self._timer is None:
            from .gpu_state import open_monitor
            from .timers import CudaTimer, make_timer

            self._timer = make_timer(self.settings.timer)
            if self._timer.name == CudaTimer.name:
                tokens = visible_gpu_tokens()
                self.monitor = open_monitor(tokens[0] if tokens else "0")
                if self.monitor is not None:
                    self.gpu_state_at_start[self.hardware_key] = self.monitor.read().describe()
            # What NVML does not report (SM count, L2) the CUDA timer read off the device: keep it.
            for name, value in getattr(self._timer, "properties", {}).items():
                self.fingerprint.hardware.setdefault(name, value)
        return self._timer

    def roofline(
        self, timer: Timer, optimized_ms: float, flops: float | None, nbytes: float | None, flops_dtype: str | None
    ) -> dict[str, Any]:
        """peak_fraction (roofline floor / measured time) and the bound, on the GPU; empty elsewhere."""
        from .ceilings import Ceilings, measure_copy_gbps, measure_matmul_tflops
        from .timers import CudaTimer

        if timer.name != CudaTimer.name or not (flops or nbytes):
            return {}
        import torch

        if self._ceilings is None:
            self._ceilings = Ceilings(copy_gbps=measure_copy_gbps(torch))
        if flops and flops_dtype and flops_dtype not in self._ceilings.matmul_tflops:
            self._ceilings.matmul_tflops[flops_dtype] = measure_matmul_tflops(torch, flops_dtype)
        floor = self._ceilings.floor_ms(flops, nbytes, flops_dtype)
        if floor is None:
            return {}
        self.ceilings_seen[self.hardware_key] = self._ceilings.to_json()
        return {"peak_fraction": floor[0] / optimized_ms, "bound": floor[1]}

    @contextlib.contextmanager
    def device_turn(self) -> Iterator[None]:
        """Hold the device's lock for a whole test when xdist workers share the device; a no-op otherwise.

        A whole test, not only its timed loop: another worker's untimed kernels (its correctness check, its
        warm-up) on the same GPU would corrupt this worker's samples just as well.
        """
        if self.assignment is None or not self.assignment.shared:
            yield
            return
        from .devices import DeviceLock

        lock = DeviceLock(self.assignment.device)
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def record(self, result: CompareResult) -> None:
        self.used = True
        self.records.append(result)
        self._note_fingerprint(result.hardware_key)

    def _note_fingerprint(self, key: str) -> None:
        # The latest view, not the first: the timer adds what NVML cannot tell (SM count, L2) when it is made,
        # which can be after a test recorded a metric.
        fp = self.fingerprint.to_json()
        if key in self._gpu_counts:
            fp["hardware"]["gpu_count"] = self._gpu_counts[key]
        self.fingerprints[key] = fp

    # -- xdist ---------------------------------------------------------------------------------------------
    def worker_payload(self) -> str:
        return json.dumps(
            {
                "records": [r.to_json() for r in self.records],
                "metrics": [m.to_json() for m in self.metric_records],
                "failed": sorted(self.failed_nodeids),
                "passed": sorted(self.passed_nodeids),
                "fingerprints": self.fingerprints,
                "ceilings": self.ceilings_seen,
                "gpu_state": self.gpu_state_at_start,
                "worker": None if self.assignment is None else {
                    "id": os.environ.get("PYTEST_XDIST_WORKER", "?"), "device": self.assignment.device,
                    "shared": self.assignment.shared},
            }
        )

    def absorb(self, payload: str) -> None:
        from .results import CompareResult, MetricResult

        data = json.loads(payload)
        self.records.extend(CompareResult.from_json(r) for r in data["records"])
        self.metric_records.extend(MetricResult.from_json(m) for m in data.get("metrics", []))
        self.failed_nodeids.update(data["failed"])
        self.passed_nodeids.update(data.get("passed", []))
        for key, fp in data["fingerprints"].items():
            known = self.fingerprints.get(key)
            if known is None or len(fp.get("hardware", {})) > len(known.get("hardware", {})):
                self.fingerprints[key] = fp  # the fuller view, whichever worker saw it
        for key, ceilings in data.get("ceilings", {}).items():
            self.ceilings_seen.setdefault(key, ceilings)
        for key, state in data.get("gpu_state", {}).items():
            self.gpu_state_at_start.setdefault(key, state)
        worker = data.get("worker")
        if worker:
            self.workers[worker["id"]] = {"device": worker["device"], "shared": worker["shared"]}
        self.used = self.used or bool(data["records"]) or bool(data.get("metrics"))

    def note_outcome(self, nodeid: str, rep: Any, perf: Any, project_root: Path) -> Path | None:
        """Record a phase's outcome of a test that used perf; keep its artifacts when it failed and they were asked
        for (returns where)."""
        if rep.when == "call" and rep.passed:
            self.passed_nodeids.add(nodeid)
        if not rep.failed:
            return None
        self.failed_nodeids.add(nodeid)
        if self.settings.artifacts_dir is None:
            return None
        from . import artifacts

        return artifacts.write(self.settings.artifacts_dir, nodeid, [r.to_json() for r in perf.results], perf.samples,
                               str(rep.longrepr), project_root)

    # -- the end of the run ---------------------------------------------------------------------------------
    def finished_and_passed(self, nodeid: str) -> bool:
        return nodeid in self.passed_nodeids and nodeid not in self.failed_nodeids

    def blessable(self) -> tuple[dict[str, list[CompareResult]], dict[str, list[MetricResult]]]:
        """Per hardware key, the timed results and metrics of tests that finished and passed: a failed check, an
        error or an interrupted test never reaches a baseline."""
        cases: dict[str, list[CompareResult]] = {}
        metrics: dict[str, list[MetricResult]] = {}
        for r in self.records:
            if r.timed and self.finished_and_passed(r.nodeid):
                cases.setdefault(r.hardware_key, []).append(r)
        for m in self.metric_records:
            if self.finished_and_passed(m.nodeid):
                metrics.setdefault(m.hardware_key, []).append(m)
        return cases, metrics

    def fingerprint_for(self, key: str) -> dict[str, Any]:
        return self.fingerprints.get(key) or self.fingerprint.to_json()

    def result_keys(self) -> list[str]:
        """The hardware keys this run has results for (this machine's when it has none)."""
        keys = {r.hardware_key for r in self.records} | {m.hardware_key for m in self.metric_records}
        return sorted(keys) or [self.hardware_key]


__all__ = ["SpeedgateSession"]
