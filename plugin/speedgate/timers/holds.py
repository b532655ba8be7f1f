"""How long the CUDA clock holds the device before a batch of calls, so that the host has queued them all before
the device starts them: the events then time the device's work, never the host's launches. Pure arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from .base import Fn

# The rounds' hold before each batch covers what the host fell behind in the last one, and this much more: the
# first launches of a batch (a slow launch's measured cost: docs/results/plugin-constants.md).
HOLD_MARGIN_MS = 1.0
# And a quarter more than that shortfall, since the host's pace changes from batch to batch.
HOLD_SLACK = 1.25
# Never longer than this: a batch is about 50 ms of work, and a side the hold cannot put behind the host (one that
# synchronizes unnoticed) must not grow it without end.
HOLD_CAP_MS = 100.0
# A call read as waiting for the hold takes at least this many times the median of its callable's other calls in the
# batch: a wait is one call's, a slow host's pace is every call's.
WAITED_RATIO = 3.0
# The shortest and longest hold behind which a call is watched for making the host wait (CudaTimer.synchronizes).
# A call whose host work alone lasts half the longest reads as waiting: it is launch-bound, timed from idle anyway.
SYNC_PROBE_MS = 20.0
SYNC_PROBE_CAP_MS = 1000.0
# A call that waits for the device waits every time; a host stalled in one probe (other work, a collection) makes a
# call that does not wait read as waiting. So a side waits only where each of this many probes says so.
SYNC_PROBES = 3


def wanted_hold_ms(behind_per_call: float, calls: int) -> float:
    """How long to hold the device before queueing `calls` calls, so that the host is never behind the device:
    what the host fell behind per call in the last batch, for each call, a quarter more, and the margin."""
    return HOLD_MARGIN_MS + HOLD_SLACK * behind_per_call * calls


def hold_ms(behind_per_call: float, calls: int, limit: float = HOLD_CAP_MS) -> float:
    """wanted_hold_ms, at most `limit` (see learn_hold) and HOLD_CAP_MS."""
    return min(limit, HOLD_CAP_MS, wanted_hold_ms(behind_per_call, calls))


def host_steps(marks_ms: Sequence[float]) -> list[float]:
    """Each call's own share of the host's queueing (ms): the marks (time since the batch started queueing, after each
    call) apart."""
    return [b - a for a, b in zip([0.0, *marks_ms[:-1]], marks_ms)]


def learn_hold(marks_ms: Sequence[float], device_ms: float, hold: float,
               keys: Sequence[object] | None = None) -> tuple[float | None, float | None]:
    """What a held batch teaches: (host ms behind per call, or None to keep the last figure; a new limit, or None).

    marks_ms: host time since the batch started queueing, after each call; device_ms: the least device time the
    batch needed (device_floor_ms); keys: each call's callable (one callable for all when None). A call that took
    the host half the hold or more, and WAITED_RATIO times the median of its callable's other calls in the batch,
    waited for it: the launch queue was full (calls of many kernels). The host was then ahead anyway, and a longer
    hold only leaves the device idle: the batch teaches no shortfall, and the hold is limited to what the host took
    to queue the calls before that one (at least the margin). A call whose host work is as long every time (a
    compiled model's guards and wrapper) waited for nothing, however short the hold; nor does a callable called once
    in the batch teach a wait (nothing to hold it against).
    """
    if not marks_ms:
        return None, None
    steps = host_steps(marks_ms)
    callables = list(keys) if keys is not None else [None] * len(steps)
    longest = max(range(len(steps)), key=steps.__getitem__)
    others = [s for i, (s, k) in enumerate(zip(steps, callables)) if k == callables[longest] and i != longest]
    if (hold > HOLD_MARGIN_MS and steps[longest] >= hold / 2 and others
            and steps[longest] >= WAITED_RATIO * median(others)):
        before = marks_ms[longest - 1] if longest else 0.0
        return None, max(HOLD_MARGIN_MS, before)
    return max(0.0, marks_ms[-1] - device_ms) / len(marks_ms), None


def device_floor_ms(fns: Sequence[Fn], times: Sequence[float], flush_ms: float) -> float:
    """The least device time a batch needed: each call at its callable's fastest in the batch, plus the flushes."""
    fastest: dict[int, float] = {}
    for fn, t in zip(fns, times):
        fastest[id(fn)] = min(t, fastest.get(id(fn), t))
    return sum(fastest[id(fn)] for fn in fns) + flush_ms * len(fns)
