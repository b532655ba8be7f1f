"""The measurement loop: first calls, warm-up, then interleaved, adaptive rounds of reference and optimized."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Callable

from .stats import RatioEstimate, bootstrap_ratio, robust_cv
from .timers import Fn, Timer


@dataclass(frozen=True)
class Policy:
    """How long and how precisely one comparison is measured."""

    min_rounds: int = 15
    max_rounds: int = 2000
    # Stop early once the 95% interval on the speedup is within +-1% of the estimate.
    target_rel_halfwidth: float = 0.01
    # Seconds of timed rounds for one comparison (warm-up not included).
    budget_s: float = 2.0
    # Warm-up: at least this many calls per side, and at least this long in total.
    warmup_calls: int = 3
    warmup_s: float = 0.1
    confidence: float = 0.95


@dataclass(frozen=True)
class Measurement:
    """What one comparison measured. Times in milliseconds; speedup = reference / optimized."""

    reference_ms: float
    optimized_ms: float
    estimate: RatioEstimate
    reference_cv: float
    optimized_cv: float
    reference_first_ms: float
    optimized_first_ms: float
    rounds: int
    seconds: float
    stopped_by: str
    timer: str
    reference_samples: list[float] = field(repr=False, default_factory=list)
    optimized_samples: list[float] = field(repr=False, default_factory=list)

    @property
    def speedup(self) -> float:
        return self.estimate.ratio


def _batch_size(per_pair_ms: float) -> int:
    """Rounds per timer call: about 50 ms of work, 1 to 50 rounds, so stopping is checked often enough."""
    if per_pair_ms <= 0:
        return 50
    return int(max(1, min(50, 50.0 / per_pair_ms)))


def measure_pair(
    reference: Fn,
    optimized: Fn,
    timer: Timer,
    policy: Policy = Policy(),
    *,
    on_first_outputs: Callable[[Any, Any], None] | None = None,
    before_rounds: Callable[[], Callable[[], None]] | None = None,
    prepare_rounds: Callable[[Fn], Fn] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Time reference against optimized in interleaved rounds until the interval is narrow or time runs out.

    Each round times both callables once, back to back; the order alternates (AB, BA, AB, ...) so that
    neither side always runs on a cache or clock state the other one left behind. One-time costs stay
    out of the samples: the first call of each side is timed separately and warm-up runs before any round.
    """
    reference_first_ms, ref_out = timer.first_call(reference)
    optimized_first_ms, opt_out = timer.first_call(optimized)
    if on_first_outputs is not None:
        on_first_outputs(ref_out, opt_out)
    del ref_out, opt_out

    start = clock()
    calls = 0
    warm: list[float] = []
    while calls < policy.warmup_calls or clock() - start < policy.warmup_s:
        warm.extend(timer.time_each([reference, optimized]))
        calls += 1
        if calls >= 1000:
            break
    if prepare_rounds is not None:
        # e.g. capture each side into a CUDA graph: the rounds then time replays, without host launch overhead.
        reference, optimized = prepare_rounds(reference), prepare_rounds(optimized)
        warm.extend(timer.time_each([reference, optimized] * policy.warmup_calls))
    per_pair_ms = sum(warm[-2:])

    # A check armed after warm-up and run after the rounds (the gate uses it to fail on a recompilation).
    after_rounds = before_rounds() if before_rounds is not None else None
    ref_samples: list[float] = []
    opt_samples: list[float] = []
    start = clock()
    stopped_by = "max-rounds"
    estimate: RatioEstimate | None = None
    while len(ref_samples) < policy.max_rounds:
        batch = min(_batch_size(per_pair_ms), policy.max_rounds - len(ref_samples))
        base = len(ref_samples)
        order: list[Fn] = []
        for i in range(batch):
            ab = (base + i) % 2 == 0
            order.extend([reference, optimized] if ab else [optimized, reference])
        times = timer.time_each(order)
        for i in range(batch):
            first, second = times[2 * i], times[2 * i + 1]
            ab = (base + i) % 2 == 0
            ref_samples.append(first if ab else second)
            opt_samples.append(second if ab else first)
        per_pair_ms = (sum(times) / batch) if batch else per_pair_ms
        if len(ref_samples) < policy.min_rounds:
            continue
        estimate = bootstrap_ratio(ref_samples, opt_samples, confidence=policy.confidence, resamples=400)
        if estimate.rel_halfwidth <= policy.target_rel_halfwidth:
            stopped_by = "converged"
            break
        if clock() - start >= policy.budget_s:
            stopped_by = "budget"
            break
    seconds = clock() - start
    if after_rounds is not None:
        after_rounds()
    return measurement_from_samples(
        ref_samples, opt_samples, reference_first_ms=reference_first_ms, optimized_first_ms=optimized_first_ms,
        seconds=seconds, stopped_by=stopped_by, timer=timer.name, confidence=policy.confidence,
    )


def measurement_from_samples(
    ref_samples: list[float],
    opt_samples: list[float],
    *,
    reference_first_ms: float,
    optimized_first_ms: float,
    seconds: float,
    stopped_by: str,
    timer: str,
    confidence: float = Policy.confidence,
) -> Measurement:
    """The Measurement of paired rounds (round i of each side timed together), wherever they were taken."""
    if len(ref_samples) != len(opt_samples) or len(ref_samples) < 2:
        raise ValueError(
            f"paired samples needed: {len(ref_samples)} reference and {len(opt_samples)} optimized rounds"
        )
    # The final interval uses more resamples than the stopping checks, for a steadier report.
    estimate = bootstrap_ratio(ref_samples, opt_samples, confidence=confidence, resamples=2000)
    return Measurement(
        reference_ms=median(ref_samples),
        optimized_ms=median(opt_samples),
        estimate=estimate,
        reference_cv=robust_cv(ref_samples),
        optimized_cv=robust_cv(opt_samples),
        reference_first_ms=reference_first_ms,
        optimized_first_ms=optimized_first_ms,
        rounds=len(ref_samples),
        seconds=seconds,
        stopped_by=stopped_by,
        timer=timer,
        reference_samples=list(ref_samples),
        optimized_samples=list(opt_samples),
    )
