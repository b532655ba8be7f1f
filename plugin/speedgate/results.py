"""The typed results of a run: one CompareResult per comparison, one MetricResult per metric, end to end.

They cross xdist's channel and reach blessing, every report, the chart and `compare` as these types (to_json /
from_json at the edges only); a verdict stays a Verdict until text is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .verdict import Verdict


@dataclass(frozen=True)
class CompareResult:
    """One comparison as measured and judged. Times in milliseconds; speedup = reference_ms / optimized_ms."""

    case_id: str
    nodeid: str
    name: str | None
    hardware_key: str
    timed: bool
    verdict: Verdict
    note: str
    tolerance: float
    speedup: float | None = None
    reference_ms: float | None = None
    optimized_ms: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    noise: float | None = None
    reference_cv: float | None = None
    optimized_cv: float | None = None
    rounds: int | None = None
    timer: str | None = None
    stopped_by: str | None = None
    reference_first_ms: float | None = None
    optimized_first_ms: float | None = None
    baseline: float | None = None  # the speedup judged against: the blessed one, or the kind's center (evidence.judged_against)
    blessed: float | None = None  # the entry's blessed speedup, whichever was judged against
    change: float | None = None
    remeasured: bool = False
    # Rounds dropped while the device's speed still drifted (speedgate.measure's settling), and whether it settled.
    dropped_rounds: int = 0
    settled: bool = True
    # Held batches of rounds, and in how many the device outran the host (speedgate.measure.Measurement); None where
    # nothing held.
    held_batches: int | None = None
    outrun_batches: int | None = None
    cut_batches: int | None = None  # of the held batches, those cut into pieces, each behind its own hold
    flops: float | None = None
    bytes: float | None = None
    max_abs_error: float | None = None
    rel_error: float | None = None
    flops_dtype: str | None = None
    reference_stats: dict[str, Any] | None = None
    optimized_stats: dict[str, Any] | None = None
    peak_fraction: float | None = None
    bound: str | None = None
    config: dict[str, Any] | None = None
    throttled: dict[str, float] | None = None
    graphed: bool = False
    # GPU, after the rounds: a few calls per side timed as the rounds time them, under the profiler: the events' median
    # of those calls and the device's busy time per call (median; every stream but the L2 flush's).
    reference_profiled_ms: float | None = None
    optimized_profiled_ms: float | None = None
    reference_busy_ms: float | None = None
    optimized_busy_ms: float | None = None
    # Traces of those calls the profiler lost (no device activity at all) before a try recorded them, both sides
    # together (timers.cuda.LostTrace): a count, so that a run shows how often the retry ran.
    traces_lost: int = 0
    budget: dict[str, float] | None = None  # how the comparison's wall time was spent (see measure.Measurement)
    # A regressed or improved case: each side's median against the blessed entry's (now / blessed - 1).
    reference_change: float | None = None
    optimized_change: float | None = None
    # What the correctness check compared: "returns" (the two return values), "outputs" (outputs= after each
    # side), "off" (check=False: unchecked), "caller" (compare_samples: the caller's to check); "" when unknown
    # (a record written before the field existed).
    check: str = ""
    # Whether compare() was given tolerance= (a pinned tolerance wins over a calibrated one; see blessing).
    tolerance_pinned: bool = False
    # --speedgate-calibrate: how many measurements were taken, and the between-run spread of their speedups
    # (blessing.between_run_spread); None when not calibrating.
    calibration_runs: int | None = None
    calibration_spread: float | None = None
    # Where the tolerance came from (speedgate.tolerance.SOURCES); "" in a record written before the field existed.
    tolerance_source: str = ""
    # How the verdict's correctness was established (speedgate.checks: "fresh inputs", "fixed inputs", "unchecked",
    # "caller"); "" in a record written before the field existed.
    established: str = ""
    # The checks the case waived, with its reasons (perf.compare(..., waive=...)).
    waived: dict[str, str] | None = None
    # An anonymized identity of the card that measured it (hardware.card_id); None on the CPU or when NVML cannot tell.
    card: str | None = None
    # Counted in SM cycles (timer cuda-sm-cycles-held: reference_ms and optimized_ms are ms at the full SM clock):
    # each side's median as its CUDA events timed it, and the SM clock it ran at (MHz).
    reference_event_ms: float | None = None
    optimized_event_ms: float | None = None
    reference_mhz: float | None = None
    optimized_mhz: float | None = None
    # The kernels each side launched, as deterministic facts (speedgate.codegen): {"reference": [...], "optimized":
    # [...]}; and what changed in them since the bless, one line each.
    codegen: dict[str, Any] | None = None
    codegen_changes: list[str] | None = None
    # What set a calibrated tolerance over report.WIDE_TOLERANCE, in words (evidence.cause_of): the report says it.
    tolerance_cause: str | None = None
    # Whether those changes came with new software since the bless (a compiler or library upgrade changed the
    # kernels): what --speedgate-strict fails on. Without new software they are picks, reported only.
    codegen_drift: bool = False
    # When the kernels were one of the entry's other picks (speedgate.picks): which, and that pick's speedup, in words.
    judged_pick: str | None = None
    # When the verdict was given (UTC, ISO 8601), and the host's 1-minute load average then with the cores this process
    # may use (devices.host_state): what ran beside a side bound by the host's launches, for a reader of the report.
    judged_at: str | None = None
    host_load: float | None = None
    host_cores: int | None = None

    @property
    def unchecked(self) -> bool:
        """Whether this case was timed without any check of its outputs (check=False)."""
        return self.check == "off"

    @property
    def real_optimized_ms(self) -> float | None:
        """The optimized side's median as its events timed it (optimized_ms unless counted in cycles)."""
        return self.optimized_event_ms or self.optimized_ms

    @property
    def achieved_tflops(self) -> float | None:
        """The optimized side's arithmetic rate, when flops= was given."""
        ms = self.real_optimized_ms
        if self.flops is None or not ms:
            return None
        return self.flops / (ms * 1e-3) / 1e12

    @property
    def achieved_gbps(self) -> float | None:
        """The optimized side's memory rate, when bytes= was given."""
        ms = self.real_optimized_ms
        if self.bytes is None or not ms:
            return None
        return self.bytes / (ms * 1e-3) / 1e9

    @property
    def detectable_drop(self) -> float | None:
        """The smallest drop of the speedup from this run's reading that this case fails on, at its tolerance, this
        run's noise and where the reading sits against the speedup it was judged against (attribution.detectable_drop;
        without a baseline, from the baseline itself)."""
        from .attribution import detectable_drop

        if not self.timed:
            return None
        offset = self.speedup / self.baseline - 1 if self.speedup and self.baseline else 0.0
        return detectable_drop(self.tolerance, self.noise, offset)

    @property
    def timing_accuracy(self) -> float | None:
        """The optimized side's events over the device's busy time in the same profiled calls (1.0: the events saw
        exactly its work; above 1: launch latency and gaps between its kernels, which the events rightly count).

        The same calls, not the rounds' median: after the profiler's hold the device runs the calls from a cool
        start, and a power-bound kernel (a large matmul) runs them faster than in the rounds' steady state, which is
        the device's speed, not the events' error (docs/results/plugin-constants.md)."""
        if not self.optimized_busy_ms or not self.optimized_profiled_ms:
            return None
        return self.optimized_profiled_ms / self.optimized_busy_ms

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record["verdict"] = self.verdict.value
        record["achieved_tflops"] = self.achieved_tflops
        record["achieved_gbps"] = self.achieved_gbps
        record["timing_accuracy"] = self.timing_accuracy
        record["detectable_drop"] = self.detectable_drop
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> CompareResult:
        return cls(**_fields_of(cls, record))


@dataclass(frozen=True)
class MetricResult:
    """One single-valued metric as judged against its baseline."""

    metric_id: str
    nodeid: str
    name: str
    hardware_key: str
    value: float
    tolerance: float
    direction: str
    unit: str
    verdict: Verdict
    note: str
    baseline: float | None = None
    change: float | None = None

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record["verdict"] = self.verdict.value
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> MetricResult:
        return cls(**_fields_of(cls, record))


def _fields_of(cls: type, record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's values for cls's fields (derived keys such as achieved_gbps are dropped), verdict as a Verdict."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in record.items() if k in names}
    values["verdict"] = Verdict(values["verdict"])
    return values


__all__ = ["CompareResult", "MetricResult"]
