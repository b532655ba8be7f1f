"""Judging one comparison or metric: its measurement against its baseline entry, the result, its note and its
failure text."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .advice import next_step, rebless_hint
from .attribution import which_side_moved
from .closeness import Closeness
from .evidence import judged_against
from .measure import Measurement
from .results import CompareResult, MetricResult
from .stats import sample_stats
from .verdict import Judgement, Verdict, judge, judge_metric

# A case is reported as measured on an unstable GPU when thermal policy held its clocks down for more than this
# fraction of its comparison (NVML violation counters, read before and after).
THROTTLE_NOTE_FRACTION = 0.05


def judge_measurement(
    measurement: Measurement,
    again: Callable[[], Measurement],
    fields: Mapping[str, Any],
    *,
    entry: Mapping[str, Any] | None,
    file_found: bool,
    remeasure: bool,
    graphed: bool,
    throttled: Mapping[str, float],
    roofline: Callable[[Measurement], dict[str, Any]],
    closeness: list[Closeness],
    software: Mapping[str, Any] | None = None,
) -> tuple[CompareResult, Measurement, Measurement]:
    """The judged result of a measurement, re-measured once (again()) before a regression stands when remeasure;
    returns (result, first measurement, the measurement judged)."""
    tolerance = fields["tolerance"]
    blessed = entry["speedup"] if entry else None
    baseline, centered = judged_against(entry, tolerance) if entry else (None, 0)
    judgement = judge(measurement.estimate, baseline, tolerance, file_found=file_found)
    first = measurement
    if judgement.verdict == Verdict.REGRESSED and remeasure:
        # Re-measure once before failing: a transient (another process, a clock dip) must not fail CI.
        measurement = again()
        judgement = judge(measurement.estimate, baseline, tolerance, file_found=file_found)
    note = judgement.note
    if centered and judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
        note += f" (the baseline is the median of {centered} cards' evidence (blessed {blessed:.3f}x on one))"
    if judgement.verdict == Verdict.IMPROVED:
        note += f" ({rebless_hint()})"
    if first is not measurement:
        note = f"{note} (first measurement {first.speedup:.3f}x regressed; re-measured)".strip()
    moved: dict[str, Any] = {}
    if entry and judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
        words, moved["reference_change"], moved["optimized_change"] = which_side_moved(
            measurement.reference_ms, measurement.optimized_ms, entry, software)
        note = f"{note}; {words}"
    blessed_timer = entry.get("timer") if entry else None
    if blessed_timer and blessed_timer != measurement.timer and judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
        note = f"{note}; timed with {measurement.timer}, blessed with {blessed_timer}: re-bless with this timer"
    config = fields.get("config")
    if entry and entry.get("config") is not None and config is not None and entry["config"] != config:
        note = f"{note}; configuration changed since the baseline: {entry['config']} -> {config}".lstrip("; ")
    # Power capping is the steady state of tensor-core work on these cards (recorded, not flagged); thermal
    # slowdown is not, and makes the measurement unstable.
    if throttled.get("thermal", 0.0) > THROTTLE_NOTE_FRACTION:
        note = (f"{note}; GPU thermally throttled for {min(throttled['thermal'], 1.0):.0%} of the comparison: "
                "an unstable measurement").lstrip("; ")
    if not measurement.settled:
        # No rounds dropped: this run settled, and a calibrating run after it did not (pipeline.calibration).
        when = (f"after {measurement.dropped_rounds} rounds were dropped" if measurement.dropped_rounds
                else "in a calibrating run after the judged one")
        note = f"{note}; the device's speed still drifted {when}: an unstable measurement".lstrip("; ")
    result = CompareResult(
        timed=True, verdict=judgement.verdict, note=note, **fields, **measured_fields(measurement, judgement),
        remeasured=first is not measurement, graphed=graphed, blessed=blessed,
        throttled={name: round(frac, 3) for name, frac in throttled.items()} or None,
        **roofline(measurement), **error_fields(closeness), **moved,
    )
    return result, first, measurement


def untimed(fields: Mapping[str, Any], reason: str, closeness: list[Closeness] | None = None, *,
            established: str = "") -> CompareResult:
    return CompareResult(timed=False, verdict=Verdict.UNTIMED, note=f"timing skipped: {reason}", **fields,
                         established=established, **error_fields(closeness or []))


def judge_metric_value(
    metric_id: str, nodeid: str, name: str, hardware_key: str, value: float, *, tolerance: float, direction: str,
    unit: str, entry: Mapping[str, Any] | None, file_found: bool,
) -> MetricResult:
    baseline = entry["value"] if entry else None
    judgement = judge_metric(value, baseline, tolerance, direction, file_found=file_found)
    note = judgement.note
    if judgement.verdict == Verdict.IMPROVED:
        note += f" ({rebless_hint()})"
    return MetricResult(
        metric_id=metric_id, nodeid=nodeid, name=name, hardware_key=hardware_key, value=value, tolerance=tolerance,
        direction=direction, unit=unit, verdict=judgement.verdict, note=f"{name} {note}" if note else "",
        baseline=baseline, change=judgement.change,
    )


def failure_text(
    result: CompareResult | MetricResult, *, baseline_path: Path, artifacts_dir: Path | None,
) -> str:
    """The failure message of one result: what happened and what to do next."""
    metric = isinstance(result, MetricResult)
    ident = result.metric_id if isinstance(result, MetricResult) else result.case_id
    step = next_step(result.verdict, nodeid=result.nodeid, baseline_path=baseline_path,
                     hardware_key=result.hardware_key, artifacts_dir=artifacts_dir, metric=metric)
    return f"{ident}: {result.note or result.verdict.value}\n  {step}"


def measured_fields(m: Measurement, j: Judgement) -> dict[str, Any]:
    return dict(
        speedup=m.speedup, reference_ms=m.reference_ms, optimized_ms=m.optimized_ms,
        ci_low=m.estimate.low, ci_high=m.estimate.high, noise=m.estimate.rel_halfwidth,
        reference_cv=m.reference_cv, optimized_cv=m.optimized_cv, rounds=m.rounds, timer=m.timer,
        stopped_by=m.stopped_by, reference_first_ms=m.reference_first_ms, optimized_first_ms=m.optimized_first_ms,
        reference_stats=sample_stats(m.reference_samples), optimized_stats=sample_stats(m.optimized_samples),
        baseline=j.baseline, change=j.change, budget=m.budget(), dropped_rounds=m.dropped_rounds, settled=m.settled,
    )


def error_fields(closeness: list[Closeness]) -> dict[str, Any]:
    if not closeness:
        return {}
    return dict(max_abs_error=closeness[0].max_abs_error, rel_error=closeness[0].rel_error)


def samples_record(first: Measurement, final: Measurement) -> dict[str, Any]:
    """The raw samples of a comparison, for the artifacts of a failing test."""
    return {
        "reference_ms": final.reference_samples, "optimized_ms": final.optimized_samples,
        "order": "round i timed reference then optimized when i is even, the other way round when odd",
        "first_measurement": None if first is final else {
            "reference_ms": first.reference_samples, "optimized_ms": first.optimized_samples},
    }
