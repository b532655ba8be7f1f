"""The measurement loop, driven by a scripted clock."""

from __future__ import annotations

import pytest

from speedgate.measure import Policy, measure_pair, time_pair
from speedgate.testing import ScriptedTimer


def ref() -> int:
    return 1


def opt() -> int:
    return 2


def test_constant_times_converge_at_min_rounds() -> None:
    m = measure_pair(ref, opt, ScriptedTimer({"ref": 3.0, "opt": 1.5}), Policy(warmup_s=0))
    assert m.speedup == pytest.approx(2.0)
    assert m.stopped_by == "converged" and m.rounds >= Policy().min_rounds
    assert m.estimate.low == m.estimate.high == pytest.approx(2.0)


def test_first_calls_are_kept_out_of_the_samples() -> None:
    # The first call of each side is slow (compile); it must not leak into the medians.
    timer = ScriptedTimer({"ref": [500.0] + [2.0] * 10_000, "opt": [900.0] + [1.0] * 10_000})
    m = measure_pair(ref, opt, timer, Policy(warmup_s=0))
    assert m.reference_first_ms == 500.0 and m.optimized_first_ms == 900.0
    assert m.reference_ms == 2.0 and m.optimized_ms == 1.0
    assert max(m.reference_samples) == 2.0


def test_noisy_times_stop_on_round_limit() -> None:
    timer = ScriptedTimer({"ref": [1.0, 3.0, 2.0, 5.0, 1.5], "opt": [1.0, 0.5, 2.0]})
    m = measure_pair(ref, opt, timer, Policy(warmup_s=0, max_rounds=40, target_rel_halfwidth=0.0))
    assert m.rounds == 40 and m.stopped_by == "max-rounds"
    assert m.estimate.low < m.speedup < m.estimate.high


def test_rounds_interleave_and_alternate_order() -> None:
    calls: list[str] = []

    def a() -> None:
        calls.append("a")

    def b() -> None:
        calls.append("b")

    measure_pair(a, b, ScriptedTimer({"a": 1.0, "b": 1.0}), Policy(warmup_s=0, warmup_calls=0, min_rounds=4, max_rounds=4))
    timed = calls[2:]  # after the two first calls (no warm-up asked for)
    assert timed == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_first_outputs_are_handed_to_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check stage: each side's first call (timed by the timer) returns what is compared, reference's first."""
    from speedgate import checks
    from speedgate.sides import Side

    seen = []
    monkeypatch.setattr(checks, "assert_close", lambda actual, expected, *a: seen.append((expected, actual)))
    timer = ScriptedTimer({"ref": 1.0, "opt": 1.0})
    sides = Side(ref, "reference", "c", None, None, True), Side(opt, "optimized", "c", None, None, False)
    checker = checks.Checker("c", "returns", None, None, *sides, None)
    checker.first(lambda: timer.first_call(sides[0])[1], lambda: timer.first_call(sides[1])[1])
    assert seen == [(1, 2)]


def test_prepare_rounds_replaces_both_sides_after_warm_up() -> None:
    """graph=True's mechanism: the rounds time what prepare_rounds returns (replays), not the original calls."""

    def replay_ref() -> int:
        return 1

    def replay_opt() -> int:
        return 2

    swap = {"ref": replay_ref, "opt": replay_opt}
    timer = ScriptedTimer({"ref": 5.0, "opt": 5.0, "replay_ref": 3.0, "replay_opt": 1.0})
    m = measure_pair(ref, opt, timer, Policy(warmup_s=0), prepare_rounds=lambda fn: swap[fn.__name__])
    assert m.reference_first_ms == 5.0 and m.optimized_first_ms == 5.0  # first calls: the originals
    assert m.speedup == 3.0  # rounds: the replacements


def test_before_rounds_check_runs_after_the_rounds() -> None:
    events: list[str] = []

    def arm():
        events.append("armed")
        return lambda: events.append("checked")

    import contextlib

    @contextlib.contextmanager
    def guard():
        check = arm()
        yield
        check()

    time_pair(ref, opt, ScriptedTimer({"ref": 1.0, "opt": 1.0}), Policy(warmup_s=0), guard=guard)
    assert events == ["armed", "checked"]


@pytest.mark.timing
def test_stopping_checks_stay_under_a_tenth_of_the_timed_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that costs 5 ms against rounds of 0.2 ms of work: the loop skips checks to keep statistics <= 10%."""
    import time

    from speedgate import measure

    calls: list[float] = []  # each check's seconds
    real = measure.bootstrap_ratio

    def slow_check(*args, **kwargs):
        started = time.perf_counter()
        time.sleep(0.005)
        try:
            return real(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - started)

    monkeypatch.setattr(measure, "bootstrap_ratio", slow_check)
    m = measure_pair(ref, opt, ScriptedTimer({"ref": [0.1, 0.12], "opt": [0.1, 0.08]}),
                     Policy(warmup_s=0, max_rounds=2000, target_rel_halfwidth=0.0, budget_s=60))
    timed_s = (sum(m.reference_samples) + sum(m.optimized_samples)) / 1e3  # 0.4 s of scripted work
    assert m.rounds == 2000
    # The last call is the final interval's (measurement_from_samples), not a stopping check. A check k (after the
    # first) runs only while the statistics so far (at least the checks before it) and the last check's cost fit in
    # the share of the work timed by then (at most all of it): whatever each check took on this machine, a loaded one
    # included, every check but the first started inside the share.
    checks = calls[:-1]
    for k in range(1, len(checks)):
        assert sum(checks[:k]) + checks[k - 1] <= measure.STATS_SHARE * timed_s + 1e-9, (k, checks)
    assert len(checks) < 2000 / 16  # far fewer than one a batch: checks were skipped


class HeldTimer(ScriptedTimer):
    """A timer like CudaTimer that picks the rounds' timer for the two sides (held, or each call from an idle device)."""

    name = "held"

    def __init__(self) -> None:
        super().__init__({"ref": 3.0, "opt": 1.5})
        self.asked: list[bool] = []
        self.idle = ScriptedTimer({"ref": 4.0, "opt": 3.0})
        self.idle.name = "idle-start"

    def for_sides(self, reference, optimized, latency=False, replayed=False):
        self.asked.append((latency, replayed))
        return self.idle if latency else self


def test_the_rounds_use_the_timer_the_sides_call_for() -> None:
    timer = HeldTimer()
    held = measure_pair(ref, opt, timer, Policy(warmup_s=0))
    assert held.timer == "held" and held.speedup == pytest.approx(2.0)
    idle = measure_pair(ref, opt, timer, Policy(warmup_s=0), latency=True)
    assert idle.timer == "idle-start" and idle.reference_ms == 4.0 and idle.speedup == pytest.approx(4 / 3)
    # Rounds of graph replays (prepare_rounds, graph=True) tell the timer so: it does not probe the sides as given.
    measure_pair(ref, opt, timer, Policy(warmup_s=0), prepare_rounds=lambda fn: fn)
    assert timer.asked == [(False, False), (True, False), (False, True)]


class _Outrun(ScriptedTimer):
    """A held clock whose host falls behind its hold in every third batch of rounds (Timer.outrun)."""

    def __init__(self) -> None:
        super().__init__({"ref": 3.0, "opt": 1.5})
        self.batch = 0

    def time_each(self, fns):  # type: ignore[no-untyped-def]
        self.batch += 1
        return super().time_each(fns)

    def outrun(self) -> bool:
        return self.batch % 3 == 0

    def pieces(self) -> int:
        return 4 if self.batch % 5 == 0 else 1


def test_the_measurement_counts_the_held_batches_the_host_outran() -> None:
    timer = _Outrun()
    m = measure_pair(ref, opt, timer, Policy(warmup_s=0, min_rounds=200, max_rounds=200, target_rel_halfwidth=0.0))
    assert m.held_batches is not None and m.held_batches >= 4
    rounds_from = timer.batch - m.held_batches  # the batches before the rounds: first calls and warm-up
    assert m.outrun_batches == sum((rounds_from + i) % 3 == 0 for i in range(1, m.held_batches + 1))
    assert 0 < m.outrun_batches < m.held_batches
    # And in how many the timer cut the batch into pieces, each behind its own hold.
    assert m.cut_batches == sum((rounds_from + i) % 5 == 0 for i in range(1, m.held_batches + 1)) > 0
    # A clock that holds nothing counts nothing.
    plain = measure_pair(ref, opt, ScriptedTimer({"ref": 3.0, "opt": 1.5}), Policy(warmup_s=0))
    assert plain.held_batches is None and plain.outrun_batches is None and plain.cut_batches is None


def test_a_side_that_slows_to_its_steady_speed_is_timed_at_that_speed() -> None:
    """A power-capped GPU after an idle spell: the first rounds at the full clock, then the capped one. The median
    of all the rounds would land in whichever cluster held more; the rounds before the device settled are dropped."""
    first_and_warm_up = 1 + 3
    timer = ScriptedTimer({"ref": 1.0, "opt": [1.0] * (first_and_warm_up + 12) + [1.2] * 10_000})
    m = measure_pair(ref, opt, timer, Policy(warmup_s=0))
    assert m.optimized_ms == 1.2 and m.speedup == pytest.approx(1 / 1.2)
    assert m.dropped_rounds >= 12 and m.settled
    assert max(m.optimized_samples) == min(m.optimized_samples) == 1.2


def test_steady_noise_drops_no_round() -> None:
    import random

    for seed in range(20):
        rng = random.Random(seed)
        noisy = [max(0.5, rng.gauss(1.0, 0.05)) for _ in range(20_000)]
        timer = ScriptedTimer({"ref": [max(0.5, rng.gauss(2.0, 0.1)) for _ in range(20_000)], "opt": noisy})
        m = measure_pair(ref, opt, timer, Policy(warmup_s=0))
        assert m.dropped_rounds == 0 and m.settled, seed


def test_a_side_that_never_settles_is_said_to_be_unsettled() -> None:
    from speedgate.measure import SETTLE_MAX_S

    drifting = [1.03 ** min(i, 400) for i in range(20_000)]  # 3% slower every round, past the settling limit
    m = measure_pair(ref, opt, ScriptedTimer({"ref": 1.0, "opt": drifting}), Policy(warmup_s=0))
    assert not m.settled and m.dropped_rounds > 0
    first_and_warm_up = 1 + 3
    dropped_ms = sum(drifting[first_and_warm_up:first_and_warm_up + m.dropped_rounds]) + m.dropped_rounds * 1.0
    assert dropped_ms >= SETTLE_MAX_S * 1e3  # it dropped until the limit, and then kept what it took
    assert m.rounds >= Policy().min_rounds


def test_ranks_drop_no_round() -> None:
    """Ranks must take the same rounds; only rank 0 would see a drift, so the loop of a multi-process comparison
    (agree given) drops nothing."""
    from speedgate.measure import run_rounds

    times = iter([1.0] * 12 + [1.2] * 10_000)

    def take(first: int, count: int) -> tuple[list[float], list[float]]:
        return [1.0] * count, [next(times) for _ in range(count)]

    rounds = run_rounds(take, Policy(), batch_size=lambda _ms: 25, per_pair_ms=2.0, agree=lambda decision: decision)
    assert rounds.dropped == 0 and rounds.optimized[:12] == [1.0] * 12
    alone = run_rounds(take, Policy(), batch_size=lambda _ms: 25, per_pair_ms=2.0)
    assert alone.optimized == [1.2] * len(alone.optimized)


class _Sustaining(ScriptedTimer):
    """A scripted clock on a device that a sustained load slows (a GPU at its power cap); records each batch's size."""

    sustains = True

    def __init__(self, times: dict[str, float]) -> None:
        super().__init__(times)
        self.batches: list[tuple[int, float]] = []

    def time_each(self, fns):  # type: ignore[no-untyped-def]
        times = super().time_each(fns)
        self.batches.append((len(fns), sum(times)))
        return times


def test_a_heavy_pair_is_warmed_up_sustained_on_a_device_a_sustained_load_slows() -> None:
    from speedgate.measure import SUSTAINED_WORK_S, warm_up

    heavy = _Sustaining({"ref": 3.0, "opt": 1.5})
    warm_up(heavy, [ref, opt], Policy(warmup_s=0))
    calls = Policy().warmup_calls
    singles = [work for size, work in heavy.batches if size == 2]
    sustained = [work for size, work in heavy.batches if size > 2]
    assert len(singles) == calls and sustained  # the warm-up calls, then batches back to back
    assert SUSTAINED_WORK_S * 1e3 <= sum(sustained) < SUSTAINED_WORK_S * 1e3 + max(sustained)

    light = _Sustaining({"ref": 0.2, "opt": 0.2})  # a pair this short never holds the device long enough to matter
    warm_up(light, [ref, opt], Policy(warmup_s=0))
    assert [size for size, _ in light.batches] == [2] * calls + [2 * calls]  # the one batch that judged the pair
    plain = ScriptedTimer({"ref": 3.0, "opt": 1.5})  # a clock the load does not slow (the CPU's): as before
    assert len(warm_up(plain, [ref, opt], Policy(warmup_s=0))) == 2 * calls


def test_a_pair_slow_only_before_the_hold_learns_is_not_warmed_up_sustained() -> None:
    """Single calls before the hold has learned the host's pace time the launches too (a graphed case's sides before
    capture): the pair is judged on a batch as the rounds take it."""
    from speedgate.measure import warm_up

    calls = Policy().warmup_calls
    timer = _Sustaining({"ref": [0.9] * calls + [0.1] * 10_000, "opt": [0.9] * calls + [0.1] * 10_000})
    warm_up(timer, [ref, opt], Policy(warmup_s=0))
    assert [size for size, _ in timer.batches] == [2] * calls + [2 * calls]
