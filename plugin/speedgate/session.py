"""One pytest run's speedgate state: fingerprint, baseline, timer, results, and the work at the end."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from . import baseline as baseline_file
from . import report
from .devices import Assignment, DeviceLock
from .fixture import CompareResult
from .gpu_state import Monitor, open_monitor
from .hardware import Fingerprint, detect, multi_gpu_key, software_drift, visible_gpu_tokens
from .options import Settings
from .ceilings import Ceilings, measure_copy_gbps, measure_matmul_tflops
from .timers import CudaTimer, Timer, make_timer

_ENTRY_FIELDS = (
    "speedup", "reference_ms", "optimized_ms", "ci_low", "ci_high", "noise", "reference_cv", "optimized_cv",
    "rounds", "timer", "reference_first_ms", "optimized_first_ms", "flops", "bytes", "tolerance",
    "flops_dtype", "peak_fraction", "config", "graphed",
)


def _round(value: Any) -> Any:
    """Four significant digits: enough for a gate with a 10% tolerance, few enough for small diffs."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value


def baseline_entry_from(record: dict[str, Any], software: dict[str, Any], measured_at: str) -> dict[str, Any]:
    # None means "not measured"; graphed=False is the default and is left out so old entries stay unchanged.
    entry = {name: _round(record[name]) for name in _ENTRY_FIELDS if record.get(name) is not None and record.get(name) is not False}
    entry["measured_at"] = measured_at
    entry["software"] = dict(software)
    return entry


@dataclass
class FinishReport:
    """What the end of the run did, for the terminal summary."""

    lines: list[str]
    errors: list[str]


class SpeedgateSession:
    def __init__(self, settings: Settings, assignment: Assignment | None = None) -> None:
        self.settings = settings
        self.assignment = assignment
        self._fingerprint: Fingerprint | None = None
        self._baseline: dict[str, Any] | None = None
        self._baseline_loaded = False
        self._timer: Timer | None = None
        self.records: list[dict[str, Any]] = []
        self.metric_records: list[dict[str, Any]] = []
        self.failed_nodeids: set[str] = set()
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.used = False
        self._ceilings: Ceilings | None = None
        self.ceilings_seen: dict[str, dict[str, Any]] = {}
        self.monitor: Monitor | None = None
        self.gpu_state_at_start: dict[str, str] = {}
        self._other_baselines: dict[str, dict[str, Any] | None] = {}
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
        if not self._baseline_loaded:
            self._baseline = baseline_file.read(self.baseline_path)
            self._baseline_loaded = True

    def _baseline_for(self, key: str) -> dict[str, Any] | None:
        if key == self.hardware_key:
            self.load_baseline()
            return self._baseline
        if key not in self._other_baselines:
            self._other_baselines[key] = baseline_file.read(self.baseline_path_for(key))
        return self._other_baselines[key]

    @property
    def baseline_found(self) -> bool:
        return self.baseline_found_for(self.hardware_key)

    def baseline_found_for(self, key: str) -> bool:
        return self._baseline_for(key) is not None

    def baseline_entry(self, case_id: str, key: str | None = None) -> dict[str, Any] | None:
        doc = self._baseline_for(key or self.hardware_key)
        return None if doc is None else doc["cases"].get(case_id)

    def baseline_metric(self, metric_id: str) -> dict[str, Any] | None:
        doc = self._baseline_for(self.hardware_key)
        return None if doc is None else doc.get("metrics", {}).get(metric_id)

    def record_metric(self, result: Any) -> None:
        self.used = True
        self.metric_records.append(result.to_json())
        self._note_fingerprint(result.hardware_key)

    def timer(self) -> Timer:
        if self._timer is None:
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
        lock = DeviceLock(self.assignment.device)
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def record(self, result: CompareResult) -> None:
        self.used = True
        self.records.append(result.to_json())
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
                "records": self.records,
                "metrics": self.metric_records,
                "failed": sorted(self.failed_nodeids),
                "fingerprints": self.fingerprints,
                "ceilings": self.ceilings_seen,
                "gpu_state": self.gpu_state_at_start,
                "worker": None if self.assignment is None else {
                    "id": os.environ.get("PYTEST_XDIST_WORKER", "?"), "device": self.assignment.device,
                    "shared": self.assignment.shared},
            }
        )

    def absorb(self, payload: str) -> None:
        data = json.loads(payload)
        self.records.extend(data["records"])
        self.metric_records.extend(data.get("metrics", []))
        self.failed_nodeids.update(data["failed"])
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

    # -- the end of the run ---------------------------------------------------------------------------------
    def blessable(self) -> list[dict[str, Any]]:
        """Timed results of tests that passed: a failed correctness check or error never reaches a baseline."""
        return [r for r in self.records if r["timed"] and r["nodeid"] not in self.failed_nodeids]

    def update_baselines(self) -> FinishReport:
        lines: list[str] = []
        errors: list[str] = []
        by_key: dict[str, list[dict[str, Any]]] = {}
        for record in self.blessable():
            by_key.setdefault(record["hardware_key"], []).append(record)
        metrics_by_key: dict[str, list[dict[str, Any]]] = {}
        for metric in self.metric_records:
            if metric["nodeid"] not in self.failed_nodeids:
                metrics_by_key.setdefault(metric["hardware_key"], []).append(metric)
                by_key.setdefault(metric["hardware_key"], [])
        skipped = sorted({r["case_id"] for r in self.records if r["timed"] and r["nodeid"] in self.failed_nodeids})
        for case_id in skipped:
            lines.append(f"not blessed (its test failed): {case_id}")
        for key, records in sorted(by_key.items()):
            path = self.settings.baseline_dir / f"{key}.json"
            fingerprint = self.fingerprints.get(key) or self.fingerprint.to_json()
            try:
                existing = baseline_file.read(path)
            except baseline_file.BaselineError as exc:
                errors.append(f"{exc}; nothing was written (fix or remove the file, then re-bless)")
                continue
            measured_at = baseline_file.now_iso()
            entries = {r["case_id"]: baseline_entry_from(r, fingerprint["software"], measured_at) for r in records}
            rewrite = {r["case_id"]: r["tolerance"] / 3.0 for r in records}
            metrics = metrics_by_key.get(key, [])
            metric_entries = {
                m["metric_id"]: {"value": m["value"], "tolerance": m["tolerance"], "direction": m["direction"],
                                 "unit": m["unit"], "measured_at": measured_at, "software": dict(fingerprint["software"])}
                for m in metrics
            }
            doc, changes = baseline_file.merge(
                existing, hardware_key=key, fingerprint=fingerprint, entries=entries, rewrite_fraction=rewrite,
                metrics=metric_entries, metric_rewrite_fraction={m["metric_id"]: m["tolerance"] / 3.0 for m in metrics},
            )
            counts = {action: sum(c.action == action for c in changes) for action in ("added", "updated", "kept")}
            if counts["added"] or counts["updated"] or existing is None:
                try:
                    baseline_file.write_atomic(path, doc)
                except (OSError, baseline_file.BaselineError) as exc:
                    errors.append(f"{path}: could not be written: {exc}; the previous file is unchanged")
                    continue
            lines.append(
                f"baseline {path}: {counts['added']} added, {counts['updated']} updated, "
                f"{counts['kept']} kept (moved less than a third of their tolerance), "
                f"{len(doc['cases']) + len(doc.get('metrics', {})) - len(changes)} other entries untouched"
            )
            for change in changes:
                if change.action != "kept":
                    old = f"{change.old_speedup:.4g}{change.unit} -> " if change.old_speedup is not None else ""
                    lines.append(f"  {change.action}: {change.case_id}: {old}{change.new_speedup:.4g}{change.unit}")
        return FinishReport(lines, errors)

    def header_lines(self) -> list[str]:
        """Hardware key, baseline file state and software drift, for the top of the summary."""
        if not self.used and not self.records:
            return []
        lines = []
        keys = sorted({r["hardware_key"] for r in self.records}) or [self.hardware_key]
        for key in keys:
            path = self.settings.baseline_dir / f"{key}.json"
            try:
                doc = baseline_file.read(path)
            except baseline_file.BaselineError as exc:
                lines.append(f"hardware key {key}: {exc}")
                continue
            if doc is None:
                state = "not found"
                if not self.settings.update_baselines:
                    state += " (create it with `pytest --update-baselines` on this hardware)"
            else:
                state = f"found, {len(doc['cases'])} cases"
            lines.append(f"hardware key {key}; baseline {path}: {state}")
            if key in self.gpu_state_at_start:
                lines.append(f"  GPU state when timing began: {self.gpu_state_at_start[key]}")
            ceilings = self.ceilings_seen.get(key)
            if ceilings:
                rates = ", ".join(f"{d} matmul {r:.0f} TFLOP/s" for d, r in sorted(ceilings["matmul_tflops"].items()))
                lines.append(f"  ceilings measured in this run: copy {ceilings['copy_gbps']:.0f} GB/s" + (f", {rates}" if rates else ""))
            current = self.fingerprints.get(key)
            if doc is not None and current is not None:
                drift = software_drift(doc["fingerprint"].get("software", {}), current.get("software", {}))
                if drift:
                    lines.append(f"  software drift since the baseline: {', '.join(drift)}")
        if self.workers:
            where = ", ".join(
                f"{wid} on {'the CPU' if w['device'] == 'cpu' else 'GPU ' + w['device']}"
                for wid, w in sorted(self.workers.items(), key=lambda item: (len(item[0]), item[0]))
            )
            shared = any(w["shared"] for w in self.workers.values())
            lines.append(f"xdist workers: {where}" + ("; devices shared, so tests took turns on each" if shared else ""))
        return lines

    def json_report(self) -> dict[str, Any]:
        return {
            "speedgate_report_version": 1,
            "settings": {
                "tolerance": self.settings.tolerance,
                "strict": self.settings.strict,
                "update_baselines": self.settings.update_baselines,
                "correctness_only": self.settings.correctness_only,
                "baseline_dir": str(self.settings.baseline_dir),
            },
            "fingerprints": self.fingerprints,
            "ceilings": self.ceilings_seen,
            "gpu_state_at_start": self.gpu_state_at_start,
            "workers": self.workers,
            "cases": [dict(r, test_failed=r["nodeid"] in self.failed_nodeids) for r in self.records],
            "metrics": [dict(m, test_failed=m["nodeid"] in self.failed_nodeids) for m in self.metric_records],
        }

    def benchmark_report(self) -> dict[str, Any]:
        """The run in pytest-benchmark's JSON layout (its machine and commit info, our cases)."""
        import platform

        from pytest_benchmark import __version__ as benchmark_version
        from pytest_benchmark.utils import get_commit_info

        machine = {"node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
                   "python_implementation": platform.python_implementation(), "python_version": platform.python_version(),
                   "system": platform.system(), "release": platform.release()}
        return report.benchmark_json(self.records, self.fingerprints, machine, get_commit_info(), benchmark_version,
                                     baseline_file.now_iso())


__all__ = ["SpeedgateSession", "FinishReport"]
