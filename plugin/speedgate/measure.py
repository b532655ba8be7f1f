"""The measurement policy and the one round-and-stop loop that every timer and every rank uses."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from .options import DEFAULT_BUDGET_S, DEFAULT_TARGET_NOISE
from .stats import RatioEstimate, bootstrap_ratio, drifting, robust_cv
from .timers import Fn, Timer, as_timer
from .timers.cycles import SmCycles, counts_cycles

# The stopping checks' statistics may take at most this share of the timed work (the samples' sum, which is the
# device's busy time on the GPU): when they have used more, the next check is skipped and timing goes on. A
# pure-Python bootstrap once took 99% of a fast case's comparison while the GPU idled.
STATS_SHARE = 0.10
# Settling: a comparison stops only on rounds whose speed no longer drifts. A power-capped GPU after an idle spell
# runs its first tens of ms at the full clock, then settles to the capped clock, and a median over both lands in
# whichever cluster holds more (docs/results/calibration.md, "the fp8 matmuls' two speeds"). After each batch the
# rounds kept so far are split in halves, and the first half is dropped where either side moved between them
# (`drifting`). At most SETTLE_MAX_S of timed work is dropped; after that the rounds stand, and the report says so.
# (`stats.drifting`, with SETTLE_DRIFT, SETTLE_SIGMAS and SETTLE_SEPARATION.)
SETTLE_MIN_HALF = 8
SETTLE_MAX_S = 1.0
# A pair of calls this long or longer is warmed up sustained on a device a sustained load slows (warm_up).
SUSTAINED_PAIR_MS = 1.0
SUSTAINED_WORK_S = 0.15


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
    # Rounds dropped while the device's speed drifted (run_rounds' settling), and whether it had settled.
    dropped_rounds: int = 0
    settled: bool = True
    # Held batches of rounds taken (settling's dropped ones too), and in how many the device outran the host: it
    # caught up with the host's queueing and waited for it (Timer.outrun); None where the clock holds nothing.
    held_batches: int | None = None
    outrun_batches: int | None = None
    # Of those, how many were cut into pieces, each behind its own hold (Timer.pieces): their calls started after a
    # hold, not after the call before.
    cut_batches: int | None = None
    # Rounds counted in SM cycles (timers.cycles): the samples are ms at the full clock; these are the events' own
    # medians (reference, optimized), what the audits hold against the roofline, and each side's median SM clock.
    event_ms: tuple[float, float] | None = None
    clock_mhz: tuple[float | None, float | None] | None = None
    # The fraction of this measurement's wall time that NVML counted the GPU's clocks held down by its power cap
    # (None: no monitor), so that each of a comparison's measurements says how its card ran (pipeline.Comparison).
    power_capped: float | None = None

    @property
    def real_optimized_ms(self) -> float:
        """The optimized side's median as its events timed it (the samples' median unless counted in cycles)."""
        return self.event_ms[1] if self.event_ms else self.optimized_ms

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
    # Rounds dropped while the device's speed still drifted (SETTLE_*), and whether it had settled by the end.
    dropped: int = 0
    settled: bool = True


TakeRounds = Callable[[int, int], "tuple[list[float], list[float]]"]


def run_rounds(
    take: TakeRounds,
    policy: Policy,
    *,
    batch_size: Callable[[float], int],
    per_pair_ms: float,
    decides: bool = True,
    agree: Callable[[str | None], str | None] | None = None,
    between: Callable[[int], None] | None = None,
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
    paused = 0.0  # seconds spent in between(): not the rounds' budget
    stopped_by = "max-rounds"
    batch = 0
    taken = 0  # rounds taken, the dropped ones included: the AB/BA order goes on from them
    # Ranks drop nothing: they must take the same rounds, and only rank 0 would see the drift.
    settling = decides and agree is None
    unsettled = False  # still drifting when SETTLE_MAX_S was dropped
    dropped = 0
    dropped_s = 0.0
    while len(ref) < policy.max_rounds:
        count = max(1, min(batch_size(per_pair_ms), policy.max_rounds - len(ref)))
        r, o = take(taken, count)
        taken += count
        ref.extend(r)
        opt.extend(o)
        batch_ms = sum(r) + sum(o)
        per_pair_ms = batch_ms / count
        timed_s += batch_ms / 1e3
        steady = not settling
        if settling and len(ref) >= 2 * SETTLE_MIN_HALF:
            # Checked at every batch, not once: after a long idle spell the full clock can outlast the first batch.
            t0 = time.perf_counter()
            half = len(ref) // 2
            if drifting(ref[:half], ref[half:]) or drifting(opt[:half], opt[half:]):
                dropped += half
                dropped_s += (sum(ref[:half]) + sum(opt[:half])) / 1e3
                del ref[:half], opt[:half]
                if dropped_s >= SETTLE_MAX_S:
                    settling, unsettled = False, True
            else:
                steady = True
            stats_s += time.perf_counter() - t0
        decision: str | None = None
        if decides and steady and len(ref) >= policy.min_rounds:
            # A check only when it keeps the statistics under their share of the work timed so far (the next
            # check is assumed to cost what the last one did).
            if stats_s + last_check_s <= STATS_SHARE * timed_s or not stats_s:
                t0 = time.perf_counter()
                estimate = bootstrap_ratio(ref, opt, confidence=policy.confidence, resamples=400)
                last_check_s = time.perf_counter() - t0
                stats_s += last_check_s
                if estimate.rel_halfwidth <= policy.target_rel_halfwidth:
                    decision = "converged"
            if decision is None and clock() - start - paused >= policy.budget_s:
                decision = "budget"
        if agree is not None:
            decision = agree(decision)
        if decision:
            stopped_by = decision
            break
        if between is not None:
            t0 = clock()
            between(batch)
            paused += clock() - t0
        batch += 1
    return Rounds(ref, opt, stopped_by, clock() - start - paused, stats_s, dropped=dropped,
                  settled=not unsettled)


def warm_statistics() -> None:
    """Import and run the statistics once, before any comparison: their first call (numpy's import) must not be
    charged to a comparison's rounds."""
    bootstrap_ratio([1.0, 2.0], [1.0, 2.0], resamples=2)


def _batch_size(per_pair_ms: float) -> int:
    """Rounds per timer call: about 50 ms of work, 1 to 50 rounds, so stopping is checked often enough."""
    if per_pair_ms <= 0:
        return 50
    return int(max(1, min(50, 50.0 / per_pair_ms)))


@dataclass
class Timed:
    """One comparison's rounds: the measurement, and the callables that were timed (graph replays when a prepare
    step captured the sides), for the checks after the rounds."""

    measurement: Measurement
    reference: Fn
    optimized: Fn


def warm_up(timer: Timer, fns: list[Fn], policy: Policy, clock: Callable[[], float] = time.monotonic) -> list[float]:
    """Call fns in turn until each ran policy.warmup_calls times and policy.warmup_s passed; their times.

    On a timer whose device a sustained load slows (`Timer.sustains`: a GPU at its power cap), a pair that takes at
    least SUSTAINED_PAIR_MS in a batch as the rounds time it is instead warmed up in such batches, back to back,
    until SUSTAINED_WORK_S of device work: after an idle spell (a compile, an autotuner) a power-bound kernel runs
    tens of ms at the full clock, and a comparison wholly inside that spell read faster than the capped speed every
    other one reads (docs/results/calibration.md, "the fp8 matmuls' two speeds"). The pair is judged on a
    batch, not on the single calls before it: before the hold has learned the host's pace those time its launches."""
    start = clock()
    warm: list[float] = []
    for _ in range(policy.warmup_calls):
        warm.extend(timer.time_each(fns))
    if timer.sustains:
        batch = timer.time_each(list(fns) * max(1, policy.warmup_calls))
        warm.extend(batch)
        pair_ms = sum(median(batch[i::len(fns)]) for i in range(len(fns)))
        if pair_ms >= SUSTAINED_PAIR_MS:
            work_ms = sum(batch)
            while work_ms < SUSTAINED_WORK_S * 1e3:
                times = timer.time_each(list(fns) * _batch_size(pair_ms))
                warm.extend(times)
                work_ms += sum(times)
            return warm
    calls = policy.warmup_calls
    while clock() - start < policy.warmup_s and calls < 1000:
        warm.extend(timer.time_each(fns))
        calls += 1
    return warm


def paired_take(reference: Fn, optimized: Fn, timer: Timer) -> TakeRounds:
    """take(first, count) for run_rounds: count rounds of both sides, reference first in even rounds (AB, BA, AB...)
    so that neither side always runs on a cache or clock state the other one left behind."""

    def take(first: int, count: int) -> tuple[list[float], list[float]]:
        order: list[Fn] = []
        for i in range(first, first + count):
            order.extend([reference, optimized] if i % 2 == 0 else [optimized, reference])
        times = timer.time_each(order)
        pairs = [(times[2 * k], times[2 * k + 1]) for k in range(count)]
        return ([a if (first + k) % 2 == 0 else b for k, (a, b) in enumerate(pairs)],
                [b if (first + k) % 2 == 0 else a for k, (a, b) in enumerate(pairs)])

    return take


def time_pair(
    reference: Fn,
    optimized: Fn,
    timer: Timer,
    policy: Policy = Policy(),
    *,
    first_ms: tuple[float | None, float | None] = (None, None),
    latency: bool = False,
    prepare: Callable[[Fn], Fn] | None = None,
    guard: Callable[[], Any] | None = None,
    between: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    compute_floor_ms: float | None = None,
) -> Timed:
    """Warm both sides up, then time them in interleaved rounds until the interval is narrow or time runs out.

    The first calls are the caller's (their times come in as first_ms). The rounds run on the timer the sides need
    (Timer.for_sides: a CUDA timer may start every call from an idle device). prepare, when given, turns each side
    into what the rounds time (a CUDA graph replay) after warm-up; guard() is a context manager around the rounds
    (the gate's check that nothing recompiled); between(batch) runs after each batch of rounds, outside the timed
    intervals (the gate's checkpoints). compute_floor_ms: the roofline floor of work the case declared compute-bound;
    a pair it makes tensor-core-bound (counts_cycles) is counted in SM cycles where the timer can (Timer.in_cycles).
    """
    rounds_timer = as_timer(timer).for_sides(reference, optimized, latency=latency, replayed=prepare is not None)
    warm = warm_up(rounds_timer, [reference, optimized], policy, clock)
    counter = rounds_timer.in_cycles() if counts_cycles(warm, compute_floor_ms, SUSTAINED_PAIR_MS) else None
    rounds_timer = counter or rounds_timer
    if prepare is not None:
        reference, optimized = prepare(reference), prepare(optimized)
        warm.extend(rounds_timer.time_each([reference, optimized] * policy.warmup_calls))
    held = {"batches": 0, "outrun": 0, "cut": 0}
    take = paired_take(reference, optimized, rounds_timer)

    def counted(first: int, count: int) -> tuple[list[float], list[float]]:
        taken = take(first, count)
        if (outrun := rounds_timer.outrun()) is not None:
            held["batches"] += 1
            held["outrun"] += bool(outrun)
            held["cut"] += (rounds_timer.pieces() or 1) > 1
        return taken

    with guard() if guard is not None else contextlib.nullcontext():
        rounds = run_rounds(counted, policy, batch_size=_batch_size, per_pair_ms=sum(warm[-2:]), between=between,
                            clock=clock)
    measurement = measurement_from_samples(
        rounds.reference, rounds.optimized, reference_first_ms=first_ms[0], optimized_first_ms=first_ms[1],
        seconds=rounds.seconds, stopped_by=rounds.stopped_by, timer=rounds_timer.name, confidence=policy.confidence,
        stats_seconds=rounds.stats_seconds, dropped_rounds=rounds.dropped, settled=rounds.settled,
    )
    if held["batches"]:
        measurement = dataclasses.replace(measurement, held_batches=held["batches"], outrun_batches=held["outrun"],
                                          cut_batches=held["cut"])
    if isinstance(counter, SmCycles):
        (ref_ms, ref_mhz), (opt_ms, opt_mhz) = counter.side(reference), counter.side(optimized)
        if ref_ms and opt_ms:
            measurement = dataclasses.replace(measurement, event_ms=(ref_ms, opt_ms), clock_mhz=(ref_mhz, opt_mhz))
    return Timed(measurement, reference, optimized)


def measure_pair(
    reference: Fn,
    optimized: Fn,
    timer: Timer,
    policy: Policy = Policy(),
    *,
    latency: bool = False,
    prepare_rounds: Callable[[Fn], Fn] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Each side's first call (timed alone: one-time costs stay out of the samples), then time_pair: for tools and
    tests that time two callables without the gate's checks."""
    timer = as_timer(timer)
    first = timer.first_call(reference)[0], timer.first_call(optimized)[0]
    return time_pair(reference, optimized, timer, policy, first_ms=first, latency=latency, prepare=prepare_rounds,
                     clock=clock).measurement


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
    dropped_rounds: int = 0,
    settled: bool = True,
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
        dropped_rounds=dropped_rounds,
        settled=settled,
    )
