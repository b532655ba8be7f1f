"""The measurement policy and the one round-and-stop loop that every timer and every rank uses."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from .options import DEFAULT_BUDGET_S, DEFAULT_TARGET_NOISE
from .stats import RatioEstimate, bootstrap_ratio, robust_cv
from .timers import Fn, Timer

# The stopping checks' statistics may take at most this share of the timed work (the samples' sum, which is the
# device's busy time on the GPU): when they have used more, the next check is skipped and timing goes on. A
# pure-Python bootstrap once took 99% of a fast case's comparison while the GPU idled.
STATS_SHARE = 0.10


@dataclass(frozen=True)
class Policy:
    """How long and how precisely one comparison is measured. Built once from the settings (Policy.from_settings)
    and given to every comparison: in process, and to the ranks of a multi-process one (to_json / from_json)."""

    min_rounds: int = 15
    max_rounds: int = 2000
    # Stop early once the 95% interval on the speedup is within +-target_rel_halfwidth of the estimate.
    target_rel_halfwidth: float = DEFAULT_TARGET_NOISE
    # Seconds of timed rounds for one comparison (warm-up not included).
    budget_s: float = DEFAULT_BUDGET_S
    # Warm-up: at least this many calls per side, and at least this long in total.
    warmup_calls: int = 3
    warmup_s: float = 0.1
    confidence: float = 0.95

    @classmethod
    def from_settings(cls, settings: Any) -> Policy:
        return cls(budget_s=settings.budget_s, target_rel_halfwidth=settings.target_noise)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown measurement policy fields: {', '.join(unknown)}")
        return cls(**data)


@dataclass(frozen=True)
class Measurement:
    """What one comparison measured. Times in milliseconds; speedup = reference / optimized."""

    reference_ms: float
    optimized_ms: float
    estimate: RatioEstimate
    reference_cv: float
    optimized_cv: float
    reference_first_ms: float | None
    optimized_first_ms: float | None
    rounds: int
    seconds: float
    stopped_by: str
    timer: str
    reference_samples: list[float] = field(repr=False, default_factory=list)
    optimized_samples: list[float] = field(repr=False, default_factory=list)
    # Seconds the stopping checks' statistics took during the rounds (host time, the device idle meanwhile).
    stats_seconds: float = 0.0

    @property
    def speedup(self) -> float:
        return self.estimate.ratio

    def budget(self) -> dict[str, float]:
        """How the rounds' wall time was spent: timed calls (the samples' sum), statistics, and the rest (host
        overhead: launches, flushes, event reads)."""
        timed = (sum(self.reference_samples) + sum(self.optimized_samples)) / 1e3
        return {"seconds": round(self.seconds, 4), "timed_s": round(timed, 4),
                "stats_s": round(self.stats_seconds, 4),
                "other_s": round(max(self.seconds - timed - self.stats_seconds, 0.0), 4)}


@dataclass
class Rounds:
    """The paired samples of one run of the loop and why it stopped."""

    reference: list[float]
    optimized: list[float]
    stopped_by: str
    seconds: float
    stats_seconds: float


TakeRounds = Callable[[int, int], "tuple[list[float], list[float]]"]


def run_rounds(
    take: TakeRounds,
    policy: Policy,
    *,
    batch_size: Callable[[float], int],
    per_pair_ms: float,
    decides: bool = True,
    agree: Callable[[str | None], str | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Rounds:
    """Take rounds in batches until the interval is narrow (converged), the budget is spent, or max_rounds.

    take(first_round, count) times count rounds and returns (reference samples, optimized samples); round i runs
    reference first when i is even. decides=False: this process does not judge (a rank other than 0); agree, when
    given, turns this process's decision into the one every process acts on (a broadcast from rank 0).
    """
    ref: list[float] = []
    opt: list[float] = []
    stats_s = last_check_s = 0.0
    timed_s = 0.0
    start = clock()
    stopped_by = "max-rounds"
    while len(ref) < policy.max_rounds:
        count = max(1, min(batch_size(per_pair_ms), policy.max_rounds - len(ref)))
        r, o = take(len(ref), count)
        ref.extend(r)
        opt.extend(o)
        batch_ms = sum(r) + sum(o)
        per_pair_ms = batch_ms / count
        timed_s += batch_ms / 1e3
        decision: str | None = None
        if decides and len(ref) >= policy.min_rounds:
            # A check only when it keeps the statistics under their share of the work timed so far (the next
            # check is assumed to cost what the last one did).
            if stats_s + last_check_s <= STATS_SHARE * timed_s or not stats_s:
                t0 = time.perf_counter()
                estimate = bootstrap_ratio(ref, opt, confidence=policy.confidence, resamples=400)
                last_check_s = time.perf_counter() - t0
                stats_s += last_check_s
                if estimate.rel_halfwidth <= policy.target_rel_halfwidth:
                    decision = "converged"
            if decision is None and clock() - start >= policy.budget_s:
                decision = "budget"
        if agree is not None:
            decision = agree(decision)
        if decision:
            stopped_by = decision
            break
    return Rounds(ref, opt, stopped_by, clock() - start, stats_s)


def warm_statistics() -> None:
    """Import and run the statistics once, before any comparison: their first call (numpy's import) must not be
    charged to a comparison's rounds."""
    bootstrap_ratio([1.0, 2.0], [1.0, 2.0], resamples=2)


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
    after_rounds: Callable[[Fn, Fn, Rounds], None] | None = None,
    latency: bool = False,
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

    # The timer for these sides, warm-up included (CudaTimer: its device hold, learnt anew for them, or each call
    # from an idle device when latency is asked for or a side synchronizes; see timers.IdleStart).
    for_sides = getattr(timer, "for_sides", None)
    rounds_timer: Timer = for_sides(reference, optimized, latency=latency) if for_sides is not None else timer

    start = clock()
    calls = 0
    warm: list[float] = []
    while calls < policy.warmup_calls or clock() - start < policy.warmup_s:
        warm.extend(rounds_timer.time_each([reference, optimized]))
        calls += 1
        if calls >= 1000:
            break
    if prepare_rounds is not None:
        # e.g. capture each side into a CUDA graph: the rounds then time replays, without host launch overhead.
        reference, optimized = prepare_rounds(reference), prepare_rounds(optimized)
        warm.extend(rounds_timer.time_each([reference, optimized] * policy.warmup_calls))

    def take(first: int, count: int) -> tuple[list[float], list[float]]:
        order: list[Fn] = []
        for i in range(first, first + count):
            order.extend([reference, optimized] if i % 2 == 0 else [optimized, reference])
        times = rounds_timer.time_each(order)
        pairs = [(times[2 * k], times[2 * k + 1]) for k in range(count)]
        return ([a if (first + k) % 2 == 0 else b for k, (a, b) in enumerate(pairs)],
                [b if (first + k) % 2 == 0 else a for k, (a, b) in enumerate(pairs)])

    # A check armed after warm-up and run after the rounds (the gate uses it to fail on a recompilation).
    recompiled = before_rounds() if before_rounds is not None else None
    rounds = run_rounds(take, policy, batch_size=_batch_size, per_pair_ms=sum(warm[-2:]), clock=clock)
    if recompiled is not None:
        recompiled()
    if after_rounds is not None:
        # e.g. re-check the outputs of what was timed (graph replays too) and where its device work ran.
        after_rounds(reference, optimized, rounds)
    return measurement_from_samples(
        rounds.reference, rounds.optimized, reference_first_ms=reference_first_ms,
        optimized_first_ms=optimized_first_ms, seconds=rounds.seconds, stopped_by=rounds.stopped_by,
        timer=rounds_timer.name, confidence=policy.confidence, stats_seconds=rounds.stats_seconds,
    )


def measurement_from_samples(
    ref_samples: list[float],
    opt_samples: list[float],
    *,
    reference_first_ms: float | None,
    optimized_first_ms: float | None,
    seconds: float,
    stopped_by: str,
    timer: str,
    confidence: float = Policy.confidence,
    stats_seconds: float = 0.0,
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
        stats_seconds=stats_seconds,
    )
