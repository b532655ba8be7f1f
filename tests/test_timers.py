"""CudaTimer's hold: the device is held before each batch long enough that the host stays ahead of it.

A simulated device (one clock for the host, one queue for the device) stands in for CUDA: an event fires when the
device reaches it, a kernel starts when the device is free and the host has launched it. A side whose launch costs
more host time than its kernel is the case the hold exists for (the persistent TMA matmul on the H100).
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest

from speedgate import timers
from speedgate.timers import HOLD_MARGIN_MS, HOLD_SLACK, CudaTimer, device_floor_ms, hold_ms


def test_no_hold_beyond_the_margin_when_the_host_kept_ahead():
    assert hold_ms(host_ms=5.0, device_ms=20.0, calls_then=100, calls_now=100) == HOLD_MARGIN_MS


def test_the_hold_makes_up_what_the_host_fell_behind_per_call_scaled_to_the_new_batch():
    # 100 calls: the host took 30 ms to queue what the device needed 20 ms for: 0.1 ms behind per call.
    assert hold_ms(30.0, 20.0, 100, 50) == pytest.approx(HOLD_MARGIN_MS + HOLD_SLACK * 0.1 * 50)


def test_the_device_floor_takes_each_callables_fastest_call_and_the_flushes():
    a, b = (lambda: None), (lambda: None)
    assert device_floor_ms([a, b, a, b], [1.0, 3.0, 1.5, 2.0], flush_ms=0.1) == pytest.approx(1 + 2 + 1 + 2 + 0.4)


class SimCuda:
    """Host and device clocks in ms. Each launch costs the host `launch_ms[name]`; the device runs queued work in
    order, each item when the host has launched it and the device is free (one stream's worth of ordering: enough
    here, since the flush and the timed stream wait for each other)."""

    def __init__(self, kernel_ms: dict[str, float], launch_ms: dict[str, float]) -> None:
        self.host = 0.0
        self.device = 0.0
        self.kernel_ms, self.launch_ms = kernel_ms, launch_ms
        self.spins: list[int] = []
        self.streams_set: list[object] = []
        sim = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, stream: object = None) -> None:
                sim.host += 0.001
                self.at = sim.device = max(sim.device, sim.host)

            def synchronize(self) -> None:
                sim.host = max(sim.host, sim.device)

            def query(self) -> bool:
                return self.at <= sim.host

            def elapsed_time(self, end: Event) -> float:
                return end.at - self.at

        class Stream:
            def __init__(self, device: object = None) -> None:
                pass

            def wait_event(self, event: object) -> None:
                pass

            def wait_stream(self, stream: object) -> None:
                pass

        self.Event, self.Stream = Event, Stream
        self.timed = Stream()

    def run(self, name: str) -> None:
        self.host += self.launch_ms[name]
        self.device = max(self.device, self.host) + self.kernel_ms[name]

    # torch.cuda's surface that CudaTimer uses
    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, device: int) -> SimpleNamespace:
        return SimpleNamespace(L2_cache_size=2**20, name="sim", multi_processor_count=1, major=9, minor=0)

    def current_stream(self) -> object:
        return self.timed

    def set_stream(self, stream: object) -> None:
        self.streams_set.append(stream)

    def synchronize(self) -> None:
        self.host = max(self.host, self.device)

    def _sleep(self, cycles: int) -> None:
        self.spins.append(cycles)
        self.host += 0.001
        self.device = max(self.device, self.host) + cycles / 1000.0  # 1000 cycles per ms


class SimTorch:
    int32 = "int32"

    def __init__(self, cuda: SimCuda) -> None:
        self.cuda = cuda

    def empty(self, n: int, dtype: object, device: object) -> SimpleNamespace:
        return SimpleNamespace(zero_=lambda: self.cuda.run("flush"))


def sim_timer(kernel_ms: float, launch_ms: float) -> tuple[CudaTimer, SimCuda]:
    cuda = SimCuda({"flush": 0.03, "side": kernel_ms}, {"flush": 0.005, "side": launch_ms})
    timer = CudaTimer(SimTorch(cuda))
    timer.clock = lambda: cuda.host / 1e3  # the simulation's host clock, in seconds like perf_counter
    return timer, cuda


def test_a_side_that_launches_slower_than_it_runs_is_timed_at_its_device_time():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    side = lambda: cuda.run("side")  # noqa: E731
    assert timer.cycles_per_ms == pytest.approx(1000.0)
    first = timer.time_each([side] * 100)  # nothing known yet: a margin's hold only, then the host falls behind
    assert max(first) > 0.25
    held = [timer.time_each([side] * 100) for _ in range(3)]
    assert all(t == pytest.approx(0.185, abs=1e-6) for batch in held for t in batch)
    assert len(cuda.spins) >= 4 and cuda.spins[-1] > HOLD_MARGIN_MS * 1000


def test_a_side_whose_kernel_outlasts_its_launch_is_held_only_by_the_margin():
    timer, cuda = sim_timer(kernel_ms=0.5, launch_ms=0.05)
    side = lambda: cuda.run("side")  # noqa: E731
    for _ in range(3):
        assert statistics.median(timer.time_each([side] * 50)) == pytest.approx(0.5, abs=1e-6)
    assert cuda.spins[-1] == pytest.approx(HOLD_MARGIN_MS * 1000, rel=1e-3)
    # The flush runs on the flush stream, and the timed stream is current again after it.
    assert cuda.streams_set[-1] is cuda.timed


def test_an_explicit_hold_is_not_learned_from():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    side = lambda: cuda.run("side")  # noqa: E731
    timer.time_each([side] * 10, hold=30.0)
    assert cuda.spins[-1] == pytest.approx(30_000, rel=1e-3)
    timer.time_each([side] * 10)
    assert cuda.spins[-1] == pytest.approx(HOLD_MARGIN_MS * 1000, rel=1e-3)  # the 30 ms profiled batch taught nothing


def test_timing_accuracy_is_the_profiled_events_over_the_busy_time_of_the_same_calls():
    from speedgate.results import CompareResult
    from speedgate.verdict import Verdict

    fields = dict(case_id="t.py::a", nodeid="t.py::a", name=None, hardware_key="gpu", note="", timed=True,
                  verdict=Verdict.PASS, speedup=1.0, tolerance=0.1)
    result = CompareResult.from_json({**fields, "optimized_ms": 1.6, "optimized_profiled_ms": 1.418,
                                      "optimized_busy_ms": 1.413})
    assert result.timing_accuracy == pytest.approx(1.418 / 1.413)  # not the rounds' 1.6 ms: a power state, not error
    assert CompareResult.from_json({**fields, "optimized_ms": 1.6}).timing_accuracy is None


def syncing(cuda: SimCuda):
    """A side that launches its kernel and then waits for it (an .item() inside)."""
    def side() -> None:
        cuda.run("side")
        cuda.synchronize()
    return side


def test_a_side_that_waits_for_the_device_is_found_and_a_plain_one_is_not():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    assert timer.synchronizes(syncing(cuda))
    assert not timer.synchronizes(lambda: cuda.run("side"))


def test_such_a_side_is_timed_from_an_idle_device_and_never_grows_the_hold():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    plain = lambda: cuda.run("side")  # noqa: E731
    rounds = timer.for_sides(plain, syncing(cuda))
    assert rounds.name == "cuda-events-idle-start" and "optimized side" in rounds.describe()
    spins = len(cuda.spins)
    times = rounds.time_each([plain, syncing(cuda)] * 20)
    assert len(cuda.spins) == spins  # no hold: the host waits for the device before each call
    # From an idle device a call costs its launch and its kernel, one after the other.
    assert all(t == pytest.approx(0.30 + 0.185, abs=0.002) for t in times)
    assert timer.for_sides(plain, plain) is timer


def test_latency_is_asked_for_by_the_case():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    plain = lambda: cuda.run("side")  # noqa: E731
    assert timer.for_sides(plain, plain, latency=True).describe().endswith("(latency=True)")


def test_the_hold_is_capped():
    assert hold_ms(host_ms=10_000.0, device_ms=1.0, calls_then=10, calls_now=10) == timers.HOLD_CAP_MS


def test_the_profiled_calls_are_queued_again_behind_a_longer_hold_until_the_host_was_ahead():
    import contextlib

    timer, cuda = sim_timer(kernel_ms=1.0, launch_ms=4.0)  # 10 calls take the host 40 ms to queue: beyond 30 ms
    side = lambda: cuda.run("side")  # noqa: E731
    entered: list[int] = []

    def trace() -> contextlib.AbstractContextManager[int]:
        entered.append(len(entered))
        return contextlib.nullcontext(entered[-1])

    times, last = timer.queued_ahead([side] * 10, trace)
    assert entered == [0, 1] and last == 1  # traced twice; the second trace is the one returned
    assert timer.last_ahead and cuda.spins[-1] == pytest.approx(2 * timer.last_queued_ms * 1000, rel=0.01)
    assert all(t == pytest.approx(1.0, abs=0.002) for t in times)


def test_a_side_the_first_hold_covers_is_traced_once():
    import contextlib

    timer, cuda = sim_timer(kernel_ms=0.5, launch_ms=0.05)
    side = lambda: cuda.run("side")  # noqa: E731
    entered = []
    timer.queued_ahead([side] * 10, lambda: contextlib.nullcontext(entered.append(1)))
    assert len(entered) == 1 and timer.last_ahead
    assert cuda.spins[-1] == pytest.approx(timers.PROFILE_HOLD_MS * 1000, rel=1e-3)


def test_a_side_that_waits_for_the_device_is_traced_once():
    import contextlib

    timer, cuda = sim_timer(kernel_ms=1.0, launch_ms=4.0)
    waits = syncing(cuda)
    timer.for_sides(waits, waits)
    entered: list[int] = []
    timer.queued_ahead([waits] * 10, lambda: contextlib.nullcontext(entered.append(1)))
    assert len(entered) == 1 and not timer.last_ahead
