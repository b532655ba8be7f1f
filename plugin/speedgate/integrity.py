"""The audits of a measured comparison: what its numbers must satisfy to be believed. Each audit is a pure function
of the comparison's Evidence that returns why the result cannot be believed, or None; AUDITS lists them, in the
order they run, and a new one is a function added there. Also the profiler arithmetic the evidence comes from."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A time may beat the roofline floor computed from this run's measured ceilings by at most this factor before it is
# implausible: the ceilings are measured, so a good kernel can land a little above them (the margin's measurement:
# docs/results/plugin-constants.md).
PLAUSIBLE_PEAK_FRACTION = 1.15

# The device was busy for longer than the events measured by more than this factor (plus a small absolute slack for
# the profiler's own gaps): part of the work ran outside the timed stream.
OUTSIDE_STREAM_FACTOR = 1.25
OUTSIDE_STREAM_SLACK_MS = 0.005


def implausible(
    case_id: str, optimized_ms: float, floor_ms: float, bound: str, *, flops: float | None, nbytes: float | None,
    ceiling: str,
) -> str | None:
    """A reason the optimized side's time is impossible on this GPU (faster than its declared work allows), or None."""
    if optimized_ms <= 0 or floor_ms <= 0:
        return None
    fraction = floor_ms / optimized_ms
    if fraction <= PLAUSIBLE_PEAK_FRACTION:
        return None
    work = ", ".join(part for part in (f"{flops:.4g} flops" if flops else "", f"{nbytes:.4g} bytes" if nbytes else "") if part)
    return (f"speedgate: {case_id}: implausible: the optimized side took {optimized_ms:.4g} ms, but its declared work "
            f"({work}) needs at least {floor_ms:.4g} ms on this GPU's measured {bound} ceiling ({ceiling}): "
            f"{fraction:.0%} of peak. Either it skips work (a cached result, a partial launch grid) or it declares more "
            f"work than it does (flops=/bytes=); never blessed")


def busy_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: how long the device was busy, streams overlapping."""
    total = 0.0
    current: tuple[float, float] | None = None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += current[1] - current[0]
    return total


def busy_per_call(work: Iterable[tuple[float, float]], flushes: Iterable[tuple[float, float]]) -> list[float]:
    """The device's busy time in each call, from a trace of calls that each began with an L2 flush on its own stream:
    call i is the window from the end of flush i to the start of flush i + 1 (the last one open-ended), and its busy time
    is the union of the work intervals clipped to that window. Work that ran outside every window (on another stream,
    beside a later flush) is not counted here: `busy_ms` over all the work sees it."""
    marks = sorted(flushes)
    spans = sorted(work)
    found = []
    for i, (_, begin) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else float("inf")
        clipped = [(max(s, begin), min(e, end)) for s, e in spans if e > begin and s < end]
        found.append(busy_ms(clipped))
    return found


def profiled_busy(traced: Sequence[tuple[float, float, Any]], calls: int) -> dict[str, float]:
    """Busy milliseconds from a trace of `calls` profiled calls: (start us, end us, stream) of every device activity.

    The trace begins with a spin kernel on the flush stream, then each call's flush on that stream and its work on
    others. Returns the median busy time per call between flushes (`busy_ms`; the whole work over the calls when
    the flushes cannot be told apart) and all the work's busy time over the calls (`all_streams_ms`)."""
    ordered = sorted(traced)
    if not ordered:
        return {"busy_ms": 0.0, "all_streams_ms": 0.0}
    # Nothing ran on the device when the profiler started, and the first thing queued was the spin kernel on the
    # flush stream: the earliest device activity is on the flush stream.
    flush_stream = ordered[0][2]
    flushes = [(s, e) for s, e, stream in ordered if stream == flush_stream][1:]  # the spin kernel, then flushes
    work = [(s, e) for s, e, stream in ordered if stream != flush_stream]
    all_streams = busy_ms(work) / 1e3 / calls
    per_call = busy_per_call(work, flushes) if len(flushes) == calls else []
    return {"busy_ms": statistics.median(per_call) / 1e3 if per_call else all_streams, "all_streams_ms": all_streams}


def outside_stream(case_id: str, side: str, event_ms: float, device_busy_ms: float) -> str | None:
    """A reason the side's event time misses work it did (device busy far longer than the events saw), or None."""
    if device_busy_ms <= event_ms * OUTSIDE_STREAM_FACTOR + OUTSIDE_STREAM_SLACK_MS:
        return None
    return (f"speedgate: {case_id}: the {side} side's work does not fit in its timed interval: CUDA events measured "
            f"{event_ms:.4g} ms per call, but the device was busy {device_busy_ms:.4g} ms per call (profiler, all "
            f"streams). Likely cause: work queued on another stream that the timed stream never waits for (a missing "
            f"stream sync); make the current stream wait for it (torch.cuda.current_stream().wait_stream(s))")


@dataclass(frozen=True)
class Evidence:
    """What one comparison measured that the audits read. Times in milliseconds; None where it was not measured
    (no profiler on the CPU, no flops=/bytes= declared)."""

    case_id: str
    optimized_ms: float
    # The profiled calls of each side (timers.CudaTimer.profile_calls): the events' median, the device's busy time
    # per call between flushes, and all the work's busy time over the calls.
    profiled: Mapping[str, Mapping[str, Any]] | None = None
    # The roofline floor of the optimized side's declared work on this run's measured ceilings.
    floor_ms: float | None = None
    bound: str | None = None
    ceiling: str = ""
    flops: float | None = None
    nbytes: float | None = None


def outside_stream_audit(ev: Evidence) -> str | None:
    """Each side's work fits in its timed interval."""
    for side, traced in (ev.profiled or {}).items():
        reason = outside_stream(ev.case_id, side, traced["events_ms"], traced["all_streams_ms"])
        if reason:
            return reason
    return None


def no_device_work(ev: Evidence) -> str | None:
    """The optimized side did device work in its profiled calls whenever the reference did."""
    traced = ev.profiled or {}
    if "reference" not in traced or "optimized" not in traced:
        return None
    ref_busy, opt_busy = traced["reference"]["all_streams_ms"], traced["optimized"]["all_streams_ms"]
    if opt_busy > 0 or ref_busy <= 0:
        return None
    return (f"speedgate: {ev.case_id}: the optimized side launched no device work in its profiled calls (busy 0 ms "
            f"a call, against the reference's {ref_busy:.4g} ms): it hands back a result it did not compute on that "
            "call (a cached or reused result). If doing no device work is the optimization, say so: "
            "perf.compare(..., waive={'no-device-work': 'why'})")


def roofline_audit(ev: Evidence) -> str | None:
    """The optimized side is not faster than its declared work allows on this GPU."""
    if ev.floor_ms is None:
        return None
    return implausible(ev.case_id, ev.optimized_ms, ev.floor_ms, ev.bound or "memory", flops=ev.flops,
                       nbytes=ev.nbytes, ceiling=ev.ceiling)


Audit = Callable[[Evidence], "str | None"]

# Every audit, by the name a case uses to waive it (perf.compare(..., waive={name: reason})) and reports show.
AUDITS: dict[str, Audit] = {
    "outside-stream": outside_stream_audit,
    "no-device-work": no_device_work,
    "roofline": roofline_audit,
}
# The audits a case may waive, with a stated reason: those whose condition can be the optimization itself.
WAIVABLE = ("no-device-work",)


def first_failure(ev: Evidence, waived: Mapping[str, str]) -> str | None:
    """The reason of the first audit the evidence fails, skipping those the case waived; None when all hold."""
    for name, audit in AUDITS.items():
        if name in waived:
            continue
        reason = audit(ev)
        if reason:
            return reason
    return None
