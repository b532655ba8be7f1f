"""CudaTimer's hold: the device is held before each batch long enough that the host stays ahead of it.

A simulated device (one clock for the host, one queue for the device) stands in for CUDA: an event fires when the
device reaches it, a kernel starts when the device is free and the host has launched it. A side whose launch costs
more host time than its kernel is the case the hold exists for (the persistent TMA matmul on the H100).
"""

from __future__ import annotations

import os
import statistics
from types import SimpleNamespace

import pytest

from speedgate import timers
from speedgate.timers import HOLD_MARGIN_MS, HOLD_SLACK, CudaTimer, device_floor_ms, hold_ms, learn_hold
from speedgate.timers.cuda import LOST_TRACE_TRIES, TEARDOWN_SETTLE_S, LostTrace


def test_no_hold_beyond_the_margin_when_the_host_kept_ahead():
    behind, limit = learn_hold([0.05 * (i + 1) for i in range(100)], device_ms=20.0, hold=HOLD_MARGIN_MS)
    assert behind == 0.0 and limit is None
    assert hold_ms(behind, 100) == HOLD_MARGIN_MS


def test_the_hold_makes_up_what_the_host_fell_behind_per_call_scaled_to_the_new_batch():
    # 100 calls: the host took 30 ms to queue what the device needed 20 ms for: 0.1 ms behind per call.
    behind, limit = learn_hold([0.3 * (i + 1) for i in range(100)], device_ms=20.0, hold=5.0)
    assert behind == pytest.approx(0.1) and limit is None
    assert hold_ms(behind, 50) == pytest.approx(HOLD_MARGIN_MS + HOLD_SLACK * 0.1 * 50)


def test_a_host_that_waited_for_the_hold_learns_no_shortfall_and_limits_the_hold():
    # Calls 0-3 queued in 2 ms; call 4 blocked until the 40 ms hold ended (a full launch queue).
    marks = [0.5, 1.0, 1.5, 2.0, 41.0, 41.5]
    assert learn_hold(marks, device_ms=3.0, hold=40.0) == (None, 2.0)
    assert hold_ms(5.0, 100, limit=2.0) == 2.0
    # Behind a margin's hold a slow call teaches its shortfall (nothing shows it waited).
    assert learn_hold([20.0, 40.0], device_ms=10.0, hold=HOLD_MARGIN_MS) == (15.0, None)


def test_a_call_whose_host_work_is_long_every_time_waited_for_nothing():
    # A compiled reference taking the host 1.4 ms a call beside a 0.05 ms side, behind a 2 ms hold: each of its calls
    # takes half the hold, and none of them waited (the launch queue is far from full). Read as a wait, it limited
    # the hold to the margin and cut every later batch into one-call pieces.
    ref, opt = object(), object()
    keys = [ref, opt] * 20
    marks, t = [], 0.0
    for key in keys:
        t += 1.4 if key is ref else 0.05
        marks.append(t)
    behind, limit = learn_hold(marks, device_ms=25.6, hold=2.0, keys=keys)
    assert limit is None and behind == pytest.approx((t - 25.6) / 40)
    # A reference called once in the batch teaches no wait: nothing to hold its step against.
    assert learn_hold([1.4, 1.45], device_ms=1.3, hold=2.0, keys=[ref, opt])[1] is None
    # The same batch with one call of the reference blocked until the hold ended: that one waited.
    marks_blocked = [m if i < 6 else m + 30.0 for i, m in enumerate(marks)]
    assert learn_hold(marks_blocked, device_ms=25.6, hold=40.0, keys=keys) == (None, pytest.approx(marks[5]))
    # A side blocked at its first call of the batch, the queue filled by the other side's calls before it: a wait.
    steps = [0.5, 30.0] + [0.5, 0.4] * 9
    marks_first = [sum(steps[:i + 1]) for i in range(len(steps))]
    assert learn_hold(marks_first, device_ms=9.0, hold=40.0, keys=[ref, opt] * 10) == (None, HOLD_MARGIN_MS)


def test_the_device_floor_takes_each_callables_fastest_call_and_the_flushes():
    a, b = (lambda: None), (lambda: None)
    assert device_floor_ms([a, b, a, b], [1.0, 3.0, 1.5, 2.0], flush_ms=0.1) == pytest.approx(1 + 2 + 1 + 2 + 0.4)


class SimCuda:
    """Host and device clocks in ms, and streams that order their own work and wait for each other's events.

    Each launch costs the host `launch_ms[name]`; a kernel starts when the host has launched it, its stream's
    earlier work (and any event the stream waits for) is done and the device is free (one kernel at a time). A
    stream holds at most QUEUE pending items: launching one more blocks the host until the oldest is done.
    """

    QUEUE = 1024

    def __init__(self, kernel_ms: dict[str, float], launch_ms: dict[str, float]) -> None:
        self.host = 0.0
        self.free = 0.0  # when the device finishes the work queued so far
        self.kernel_ms, self.launch_ms = kernel_ms, launch_ms
        self.spins: list[int] = []
        sim = self

        class Stream:
            def __init__(self, device: object = None) -> None:
                self.ready = 0.0  # when this stream's queued work (and what it waits for) is done
                self.pending: list[float] = []  # completion times of its queued items

            def enqueue(self, duration: float) -> float:
                self.pending = [t for t in self.pending if t > sim.host]
                if len(self.pending) >= SimCuda.QUEUE:
                    sim.host = min(self.pending)  # the host blocks until the oldest item is done
                    self.pending = [t for t in self.pending if t > sim.host]
                begin = max(self.ready, sim.host, sim.free if duration else 0.0)
                self.ready = begin + duration
                if duration:
                    sim.free = self.ready
                self.pending.append(self.ready)
                return self.ready

            def wait_event(self, event: Event) -> None:
                self.ready = max(self.ready, event.at)

            def wait_stream(self, stream: Stream) -> None:
                self.ready = max(self.ready, stream.ready)

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, stream: Stream | None = None) -> None:
                sim.host += 0.001
                self.at = (stream or sim.current).enqueue(0.0)

            def synchronize(self) -> None:
                sim.host = max(sim.host, self.at)

            def query(self) -> bool:
                return self.at <= sim.host

            def elapsed_time(self, end: Event) -> float:
                return end.at - self.at

        self.Event, self.Stream = Event, Stream
        self.timed = self.current = Stream()
        self.streams = [self.timed]

    def run(self, name: str) -> None:
        """Launch kernel `name` on the current stream."""
        self.host += self.launch_ms[name]
        self.current.enqueue(self.kernel_ms[name])

    # torch.cuda's surface that CudaTimer uses
    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, device: int) -> SimpleNamespace:
        return SimpleNamespace(L2_cache_size=2**20, name="sim", multi_processor_count=1, major=9, minor=0)

    def current_stream(self) -> object:
        return self.current

    def set_stream(self, stream: object) -> None:
        self.current = stream

    def synchronize(self) -> None:
        self.host = max([self.host, *(s.ready for s in self.streams)])

    def _sleep(self, cycles: int) -> None:
        self.spins.append(cycles)
        self.host += 0.001
        self.current.enqueue(cycles / 1000.0)  # 1000 cycles per ms


class SimTorch:
    int32 = "int32"

    def __init__(self, cuda: SimCuda) -> None:
        self.cuda = cuda

    def empty(self, n: int, dtype: object, device: object) -> SimpleNamespace:
        return SimpleNamespace(zero_=lambda: self.cuda.run("flush"))


def sim_timer(kernel_ms: float, launch_ms: float) -> tuple[CudaTimer, SimCuda]:
    cuda = SimCuda({"flush": 0.03, "side": kernel_ms, "small": 0.01}, {"flush": 0.005, "side": launch_ms, "small": 0.005})
    timer = CudaTimer(SimTorch(cuda))
    cuda.streams.append(timer._flush_stream)
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


def test_the_timer_says_when_the_host_outran_a_batchs_hold():
    # The first batch is held by the margin alone and its host falls behind: outrun, and its calls read their
    # launches; behind the learned hold the host stays ahead. A batch started on an idle device held nothing.
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    side = lambda: cuda.run("side")  # noqa: E731
    assert timer.outrun() is None  # no batch yet
    assert max(timer.time_each([side] * 100)) > 0.25 and timer.outrun() is True
    timer.time_each([side] * 100)
    assert timer.outrun() is False
    timer.time_each([side] * 10, idle=True)
    assert timer.outrun() is None


def test_a_side_whose_kernel_outlasts_its_launch_is_held_only_by_the_margin():
    timer, cuda = sim_timer(kernel_ms=0.5, launch_ms=0.05)
    side = lambda: cuda.run("side")  # noqa: E731
    for _ in range(3):
        assert statistics.median(timer.time_each([side] * 50)) == pytest.approx(0.5, abs=1e-6)
    assert cuda.spins[-1] == pytest.approx(HOLD_MARGIN_MS * 1000, rel=1e-3)
    # The flush runs on the flush stream, and the timed stream is current again after it.
    assert cuda.current is cuda.timed


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


def stalled_once(cuda: SimCuda, stall_ms: float, on_call: int):
    """A side that does not wait for the device, whose host is stalled (another process's work) in one call."""
    calls = []

    def side() -> None:
        calls.append(1)
        if len(calls) == on_call:
            cuda.host += stall_ms
        cuda.run("side")
    return side


def test_a_host_stalled_in_one_probe_is_no_wait():
    # The probe's second call is the one behind the hold: a 15 ms stall there reads as waiting behind a 20 ms hold.
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    assert timer._waits_once(stalled_once(cuda, stall_ms=15.0, on_call=2))  # one probe alone is fooled
    assert not timer.synchronizes(stalled_once(cuda, stall_ms=15.0, on_call=2))
    assert timer.for_sides(stalled_once(cuda, 15.0, 2), stalled_once(cuda, 15.0, 2)) is timer
    assert timer.synchronizes(syncing(cuda))  # a side that waits does so in every probe


@pytest.mark.parametrize("lockstep", [True, False])
def test_ranks_in_lockstep_call_their_sides_alike_whatever_a_probe_reads(lockstep: bool):
    # A multi-rank case's sides are collectives: a rank whose probe stopped early would leave its peers waiting in a
    # collective it never queues. In lockstep every probe runs; alone, the probes stop at the first that says no.
    cuda = SimCuda({"flush": 0.03, "side": 0.185}, {"flush": 0.005, "side": 0.30})
    timer = CudaTimer(SimTorch(cuda), lockstep=lockstep)
    timer.clock = lambda: cuda.host / 1e3
    counted: list[int] = []
    stalled = stalled_once(cuda, stall_ms=15.0, on_call=2)

    def plain() -> None:
        counted.append(1)
        cuda.run("side")

    def counted_stalled() -> None:
        counted.append(1)
        stalled()

    assert not timer.synchronizes(plain) and len(counted) == (2 * timers.SYNC_PROBES if lockstep else 2)
    counted.clear()
    assert not timer.synchronizes(counted_stalled)
    assert len(counted) == (2 * timers.SYNC_PROBES if lockstep else 4)  # alone: stopped by the second probe


def test_graph_replays_are_held_whatever_the_sides_do_as_given():
    # The rounds time replays (one launch a call; a side that waits could not be captured): nothing to probe.
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    spins = len(cuda.spins)
    assert timer.for_sides(syncing(cuda), syncing(cuda), replayed=True) is timer
    assert len(cuda.spins) == spins  # no probe's hold
    assert timer.for_sides(syncing(cuda), syncing(cuda), latency=True, replayed=True).name == "cuda-events-idle-start"


def test_latency_is_asked_for_by_the_case():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    plain = lambda: cuda.run("side")  # noqa: E731
    assert timer.for_sides(plain, plain, latency=True).describe().endswith("(latency=True)")


def test_the_hold_is_capped():
    assert hold_ms(behind_per_call=1000.0, calls=10) == timers.HOLD_CAP_MS


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


def test_a_side_of_many_kernels_that_fills_the_launch_queue_does_not_grow_the_hold():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    cuda.kernel_ms["tiny"], cuda.launch_ms["tiny"] = 0.002, 0.005  # launched slower than they run

    def many() -> None:  # 16 kernels a call: 200 calls overflow the launch queue long before they are queued
        for _ in range(16):
            cuda.run("tiny")

    timer.for_sides(many, many)
    batches = [timer.time_each([many] * 200) for _ in range(8)]
    holds_ms = [spin / 1000 for spin in cuda.spins[-8:]]
    # It grew by a quarter every batch (6.5, 8.7, 11.4, ... 30.8 ms) when a host blocked on the full queue read as
    # "behind"; now the hold stops at what the host takes to fill the queue.
    assert max(holds_ms) < 12 and holds_ms[-1] < 5
    # Once the limit is known, the batch runs in pieces, each behind its own hold: every call at its device time.
    assert all(t == pytest.approx(16 * 0.002, abs=0.002) for t in batches[-1])
    assert len(batches[-1]) == 200


def test_the_flush_and_the_hold_gate_the_timed_stream():
    # The host launches this side slower than the device runs it: only a hold that the timed stream really waits
    # for (through the flush stream) puts the host ahead, and then every call reads its kernel's time.
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    side = lambda: cuda.run("side")  # noqa: E731
    timer.time_each([side] * 100)
    times = timer.time_each([side] * 100)
    assert all(t == pytest.approx(0.185, abs=0.002) for t in times)
    assert cuda.timed.ready >= timer._flush_stream.ready  # the timed stream's work came after the flush stream's


def test_the_sync_probe_holds_at_most_its_cap():
    timer, cuda = sim_timer(kernel_ms=0.1, launch_ms=800.0)  # 0.8 s of host work a call, no wait inside
    assert timer.synchronizes(lambda: cuda.run("side"))  # past half the 1 s cap: launch-bound, timed from idle
    assert cuda.spins[-1] == pytest.approx(timers.SYNC_PROBE_CAP_MS * 1000, rel=1e-3)


def test_a_batch_whose_shortfall_exceeds_the_cap_runs_in_pieces():
    timer, cuda = sim_timer(kernel_ms=0.5, launch_ms=2.0)  # 1.5 ms behind a call: 100 calls need ~190 ms of hold
    side = lambda: cuda.run("side")  # noqa: E731
    timer.for_sides(side, side)
    for _ in range(2):  # learns the shortfall (the first batch, behind a margin's hold, sees part of it)
        timer.time_each([side] * 100)
    spins = len(cuda.spins)
    times = timer.time_each([side] * 100)
    assert len(cuda.spins) - spins >= 2 and max(cuda.spins[spins:]) <= timers.HOLD_CAP_MS * 1000 * 1.001
    assert len(times) == 100 and all(t == pytest.approx(0.5, abs=0.002) for t in times)


def test_a_rendezvous_follows_the_hold_on_the_timed_stream_is_not_timed_and_keeps_the_batch_whole():
    """Calls that must start together on several devices (speedgate.distributed): the rendezvous is queued once
    after the hold, on a timed stream that waits for the hold to end (else on a real GPU it would run beside the
    hold, and each device's calls would start at its own hold's end); no call's time includes it. A shortfall past
    the cap, which cuts a batch in pieces elsewhere, leaves such a batch whole: each device learns its own hold, and
    pieces cut differently would pair one device's rendezvous with another's call."""
    timer, cuda = sim_timer(kernel_ms=0.5, launch_ms=2.0)  # 1.5 ms behind a call: past the cap in 100 calls
    side = lambda: cuda.run("side")  # noqa: E731
    met = []

    def meet():
        met.append((cuda.timed.ready, timer._hold_ended.at))  # where the timed stream stands as it is queued
        cuda.run("small")

    timer.for_sides(side, side)
    for _ in range(3):
        spins, meetings = len(cuda.spins), len(met)
        times = timer.time_each([side] * 100, rendezvous=meet)
        assert len(met) - meetings == len(cuda.spins) - spins == 1
    assert all(ready >= hold_end for ready, hold_end in met)
    assert cuda.spins[-1] == pytest.approx(timers.HOLD_CAP_MS * 1000, rel=1e-3)
    assert len(times) == 100 and all(t >= 0.5 - 0.002 for t in times)
    assert timer.time_each([side] * 3, idle=True, rendezvous=meet) and len(met) - meetings == 1


def test_a_trace_is_read_from_its_raw_events_as_the_profilers_own_events_read_it():
    """traced_intervals reads the raw kineto events (fast) in place of prof.events() (slow): the same activities, of
    the asked device type only, in the same order, at a constant offset. A real trace of the CPU's work here (the
    CPU's op ends are adjusted by events(), a few microseconds; a GPU's kernels are not, and the audit's busy times
    read both ways agreed on the H100: docs/results/suite-time.md)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from speedgate.timers.cuda import traced_intervals

    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(8)])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            model(torch.randn(4, 32))
    cpu = torch.autograd.DeviceType.CPU
    raw = sorted(traced_intervals(prof, cpu))
    slow = sorted((e.time_range.start, e.time_range.end, e.device_resource_id) for e in prof.events() if e.device_type == cpu)
    assert len(raw) == len(slow) > 8 * 3
    offset = raw[0][0] - slow[0][0]
    for (start, _, stream), (s_start, _, s_stream) in zip(raw, slow):
        assert stream == s_stream and start - offset == pytest.approx(s_start, abs=5.0)
    assert traced_intervals(prof, torch.autograd.DeviceType.CUDA) == []  # nothing of another device's

    class OldTrace:  # a torch without raw events: the profiler's own events() is read instead
        profiler = None

        def events(self):
            return prof.events()

    assert sorted(traced_intervals(OldTrace(), cpu)) == slow


def test_raw_events_are_converted_to_microseconds_and_filtered_by_device():
    from speedgate.timers.cuda import traced_intervals

    def event(device: str, start_ns: int, end_ns: int, stream: int) -> SimpleNamespace:
        return SimpleNamespace(device_type=lambda: device, start_ns=lambda: start_ns, end_ns=lambda: end_ns,
                               device_resource_id=lambda: stream)

    events = [event("cuda", 1_000, 3_500, 7), event("cpu", 0, 9_000, 1), event("cuda", 4_000, 4_250, 8)]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))
    assert traced_intervals(prof, "cuda") == [(1.0, 3.5, 7), (4.0, 4.25, 8)]


def test_the_audit_asks_kineto_to_tear_cupti_down_unless_a_value_was_set(monkeypatch):
    """A process that keeps CUPTI attached after a trace launches slower from then on; the audit's trace asks for
    the teardown before the profiler starts, and leaves a value the user (or torch) set."""
    from speedgate.timers import cuda as cuda_timers

    pytest.importorskip("torch.profiler")
    seen: list[str | None] = []

    class Traced(Exception):
        pass

    def queued_ahead(fns, trace):
        seen.append(os.environ.get("TEARDOWN_CUPTI"))
        raise Traced

    for preset, wanted in ((None, "1"), ("0", "0")):
        if preset is None:
            monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
        else:
            monkeypatch.setenv("TEARDOWN_CUPTI", preset)
        timer, _ = sim_timer(kernel_ms=1.0, launch_ms=0.1)
        monkeypatch.setattr(timer, "queued_ahead", queued_ahead)
        with pytest.raises(Traced):
            timer.profile_calls(lambda: None)
        assert seen[-1] == wanted
    env: dict[str, str] = {}
    assert cuda_timers.ask_cupti_teardown(env) == "1" and env == {"TEARDOWN_CUPTI": "1"}


def lost_trace_timer(monkeypatch, traces: list[list[SimpleNamespace]], tries: int = 1):  # type: ignore[no-untyped-def]
    """A CudaTimer whose profiled sides return `traces` in turn (each a list of raw device events), each side traced
    `tries` times back to back as queued_ahead traces one the host did not queue ahead, with the profiler sessions
    opened, the device's synchronizations and the settling sleeps counted."""
    from speedgate.timers import cuda as cuda_timers

    torch_profiler = pytest.importorskip("torch.profiler")
    monkeypatch.setattr(torch_profiler, "profile", lambda **kwargs: None)
    timer, _ = sim_timer(kernel_ms=1.0, launch_ms=0.1)
    happened: list[str] = []
    monkeypatch.setattr(timer, "_torch", SimpleNamespace(
        cuda=SimpleNamespace(synchronize=lambda: happened.append("sync")),
        autograd=SimpleNamespace(DeviceType=SimpleNamespace(CUDA="cuda"))))
    monkeypatch.setattr(cuda_timers.time, "sleep", lambda s: happened.append(f"sleep {s}"))
    monkeypatch.setattr(cuda_timers, "traced_kernels", lambda prof: [])
    sessions = iter(traces)

    def queued_ahead(fns, trace):  # type: ignore[no-untyped-def]
        for _ in range(tries):
            trace()
            happened.append("session")
        events = next(sessions)
        return [1.0] * len(fns), SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))

    monkeypatch.setattr(timer, "queued_ahead", queued_ahead)
    return timer, happened


def device_event(start_us: float, end_us: float, stream: int) -> SimpleNamespace:
    return SimpleNamespace(device_type=lambda: "cuda", start_ns=lambda: int(start_us * 1e3),
                           end_ns=lambda: int(end_us * 1e3), device_resource_id=lambda: stream)


# The hold's spin on the flush stream (9), then per call its flush there and its work on the timed stream (7).
WORKED = [device_event(0, 100, 9)] + [e for i in range(10) for e in (
    device_event(100 + 1000 * i, 130 + 1000 * i, 9), device_event(130 + 1000 * i, 1030 + 1000 * i, 7))]


def test_a_trace_the_profiler_lost_is_taken_again_after_the_teardown_lands_never_read_as_no_work(monkeypatch):
    """2 x H200, 2026-11-28: twice an eager bf16 model's profiled calls came back with no device activity at all, and
    the audit said it "launched no device work" (busy 0 ms against its 2.49 ms events). An empty trace lacks even the
    hold's spin kernel that every session records first: CUPTI lost the session (a teardown of the session before
    landing inside it, pytorch/kineto#1554). It is taken again after the device synchronized and settled."""
    timer, happened = lost_trace_timer(monkeypatch, [[], WORKED])
    profiled = timer.profile_calls(lambda: None)
    assert profiled["busy_ms"] == pytest.approx(0.9)
    assert profiled["lost"] == 1  # counted: the comparison's record says how often (traces_lost)
    assert happened.count("session") == 2
    sleep = f"sleep {TEARDOWN_SETTLE_S}"
    after_loss = happened.index("session", happened.index("session") + 1)
    assert happened[after_loss - 3:after_loss] == ["sync", sleep, "sync"]


def test_a_side_traced_again_behind_a_longer_hold_settles_between_its_traces(monkeypatch):
    """The tenth H200 study (2026-11-28): a side the host did not queue ahead is traced again at once behind a longer
    hold (queued_ahead), and the first trace's teardown landed inside the second, three tries over. Its traces are
    settled the same way: between the two, not before the first."""
    timer, happened = lost_trace_timer(monkeypatch, [WORKED], tries=2)
    assert timer.profile_calls(lambda: None)["lost"] == 0
    assert happened == ["sync", "session", "sync", f"sleep {TEARDOWN_SETTLE_S}", "sync", "session"]


def test_a_side_that_launched_nothing_is_traced_once_and_reads_no_work(monkeypatch):
    """The spin and the flushes but no work of the side's own: the trace is whole, and says the side did nothing
    (the audit's no-device-work accusation reads it); traced once."""
    timer, happened = lost_trace_timer(monkeypatch, [[e for e in WORKED if e.device_resource_id() == 9], WORKED])
    profiled = timer.profile_calls(lambda: None)
    assert profiled["busy_ms"] == 0.0 and profiled["lost"] == 0
    assert happened.count("session") == 1


def test_a_trace_lost_every_time_stops_the_audit_with_its_cause(monkeypatch):
    timer, happened = lost_trace_timer(monkeypatch, [[]] * LOST_TRACE_TRIES)
    with pytest.raises(LostTrace, match=f"no device activity in {LOST_TRACE_TRIES} traces.*TEARDOWN_CUPTI=0"):
        timer.profile_calls(lambda: None)
    assert happened.count("session") == LOST_TRACE_TRIES


def test_one_host_stall_at_a_batchs_start_does_not_cut_the_rest_of_the_comparison_in_pieces():
    """A compiled reference whose host work outlasts its kernel (the host falls a little behind, so the hold grows past
    the margin) beside a short kernel; once, the host stalls at a batch's first call for more than half the hold (a
    collection, another process). The launch queue cannot be full at a first call: that is no lesson. It read as one
    (a limit of the margin), and every later batch ran in one-call pieces, each call behind its own hold: a regime of
    its own, in which the causal flash kernel read 2-3% slower beside its compiled reference on an H200 in some
    processes (docs/results/gate-study-h200.md)."""
    cuda = SimCuda({"flush": 0.03, "ref": 1.05, "opt": 0.17}, {"flush": 0.005, "ref": 1.4, "opt": 0.05})
    timer = CudaTimer(SimTorch(cuda))
    cuda.streams.append(timer._flush_stream)
    timer.clock = lambda: cuda.host / 1e3
    stall = {"at": None}

    def ref() -> None:
        if stall["at"] == "now":
            cuda.host += 30.0
            stall["at"] = None
        cuda.run("ref")

    opt = lambda: cuda.run("opt")  # noqa: E731
    fns = [f for i in range(40) for f in ((ref, opt) if i % 2 == 0 else (opt, ref))]
    timer.for_sides(ref, opt)
    for _ in range(2):
        timer.time_each(fns)
    assert cuda.spins[-1] > 2 * HOLD_MARGIN_MS * 1000 and timer.pieces() == 1  # held once, past the margin
    stall["at"] = "now"
    timer.time_each(fns)
    for _ in range(3):
        spins = len(cuda.spins)
        times = timer.time_each(fns)
        assert len(cuda.spins) - spins == 1 and timer.pieces() == 1  # still one hold a batch
        assert all(t == pytest.approx(1.05 if f is ref else 0.17, abs=0.002) for f, t in zip(fns, times))


def test_a_launch_queue_that_fills_in_every_batch_still_limits_the_hold_and_the_pieces_are_counted():
    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    cuda.kernel_ms["tiny"], cuda.launch_ms["tiny"] = 0.002, 0.005

    def many() -> None:
        for _ in range(16):
            cuda.run("tiny")

    timer.for_sides(many, many)
    for _ in range(6):
        timer.time_each([many] * 200)
    assert timer.pieces() > 1
    timer.time_each([many] * 3, idle=True)
    assert timer.pieces() is None  # nothing held


@pytest.mark.parametrize("enabled", [True, False])
def test_no_collection_runs_while_the_host_queues_a_batch_and_the_collector_is_left_as_it_was(enabled: bool):
    import gc

    timer, cuda = sim_timer(kernel_ms=0.185, launch_ms=0.30)
    seen: list[bool] = []

    def side() -> None:
        seen.append(gc.isenabled())
        cuda.run("side")

    (gc.enable if enabled else gc.disable)()
    try:
        timer.time_each([side] * 10)
        timer.time_each([side] * 3, idle=True)
        assert seen and not any(seen)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


class _ChromeTrace:
    """A finished profiler whose chrome trace holds `events` (or whose export fails, with events None)."""

    def __init__(self, events: list | None) -> None:
        self.events = events

    def export_chrome_trace(self, path: str) -> None:
        import json

        if self.events is None:
            raise RuntimeError("no trace")
        with open(path, "w") as f:
            json.dump({"traceEvents": self.events}, f)


def test_the_device_events_of_a_trace_are_its_kernels_memsets_and_copies_in_start_order():
    from speedgate.timers.cuda import device_events, traced_kernels

    spin = {"ph": "X", "cat": "kernel", "name": "spin_kernel", "ts": 0, "dur": 1000, "args": {"stream": 9}}
    flush = {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 1001, "dur": 20, "args": {"stream": 9}}
    work = {"ph": "X", "cat": "kernel", "name": "_attn_fwd_kernel", "ts": 1030, "dur": 170,
            "args": {"stream": 7, "grid": [32, 128, 1], "block": [128, 1, 1], "registers per thread": 138}}
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 1300, "dur": 5, "args": {"stream": 7}}
    host = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 3}, {"ph": "i", "cat": "kernel", "ts": 9}]
    found = device_events(_ChromeTrace([copy, work, *host, flush, spin]))
    assert [e["name"] for e in found] == ["spin_kernel", "Memset (Device)", "_attn_fwd_kernel", "Memcpy DtoH"]
    assert device_events(_ChromeTrace(None)) == [] and device_events(_ChromeTrace([])) == []
    # The codegen facts: the timed stream's kernels only (the flush stream is the first activity's).
    assert traced_kernels(_ChromeTrace([copy, work, flush, spin])) == [
        {"name": "_attn_fwd_kernel", "grid": [32, 128, 1], "block": [128, 1, 1], "registers": 138, "share": 1.0}]
