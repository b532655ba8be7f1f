"""The Timer every clock is (an abstract base: what the measurement loop needs, and what a clock may offer), the
kinds of clock a run chooses from, the host clock for CPU work, and the CUDA event helpers the GPU clock and the lab
share."""

from __future__ import annotations

import abc
import enum
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

Fn = Callable[[], Any]


class TimerKind(str, enum.Enum):
    """The clocks --speedgate-timer chooses from: AUTO is CUDA events when torch sees a GPU, else the host clock."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


TIMER_CHOICES = tuple(kind.value for kind in TimerKind)

# Calls traced by the profiler once per side after the rounds (CudaTimer.profile_calls): enough for a median that a
# clock step in one call does not move.
PROFILED_CALLS = 10


class Timer(abc.ABC):
    """A clock for comparisons: what the measurement loop needs, and what else a clock may offer.

    Required (abstract): first_call, time_each and describe; and a `name`, the label results carry. Offered, with
    defaults for a plain clock: for_sides (the timer for one comparison's rounds), graphed and profile_calls (only
    where can_graph / can_profile say so: CUDA graphs and the profiler's view of the device), and `properties` (what
    the timer read off the device, for the fingerprint). What the run does around a clock follows from what it can
    do (these flags), never from its name. A clock injected through the `speedgate_timer` fixture need not subclass
    this: as_timer wraps it.
    """

    name = "timer"
    can_graph = False
    can_profile = False
    # Whether sustained work changes this clock's device speed (a GPU's power cap): the warm-up of a heavy pair then
    # runs sustained (speedgate.measure.warm_up).
    sustains = False
    # Whether it times work on the GPU: the run then watches the GPU's state (clocks, throttling, cooling first) and
    # measures its ceilings for the roofline (speedgate.bench).
    on_gpu = False
    properties: dict[str, Any] = {}  # never mutated: a timer that reads the device sets its own

    @abc.abstractmethod
    def first_call(self, fn: Fn) -> tuple[float, Any]:
        """Run fn once, synchronised, and return (milliseconds, its result)."""

    @abc.abstractmethod
    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        """Run each fn once, in order, and return each one's milliseconds."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for reports: what is timed and how."""

    def for_sides(self, reference: Fn, optimized: Fn, latency: bool = False, replayed: bool = False) -> Timer:
        """The timer for the rounds of these two sides (this one, for a plain clock). replayed: the rounds time CUDA
        graph replays of the sides (graph=True), not the sides as given."""
        return self

    def graphed(self, fn: Fn) -> Fn:
        """fn captured into a CUDA graph; its replay (only where can_graph)."""
        raise NotImplementedError(f"the {self.name} timer captures no CUDA graphs")

    def profile_calls(self, fn: Fn, calls: int = PROFILED_CALLS) -> dict[str, Any]:
        """Calls of fn timed as the rounds time them, under the profiler (only where can_profile): events_ms,
        busy_ms, all_streams_ms, and the kernels the calls launched (speedgate.codegen's facts)."""
        raise NotImplementedError(f"the {self.name} timer has no profiler")

    def in_cycles(self) -> Timer | None:
        """This clock's rounds counted in the device's cycles (speedgate.timers.cycles), or None where it cannot
        count them (every clock but the held CUDA one)."""
        return None

    def outrun(self) -> bool | None:
        """Whether the device outran the host in the last batch: it caught up with the host's queueing (the hold too
        short for the host's pace then), so its later calls started on a device that waited for the host, and their
        times hold that wait. None where the clock holds nothing (a plain clock, a call started on an idle device)."""
        return None

    def pieces(self) -> int | None:
        """How many pieces the last batch was cut into, each behind its own hold (1: held whole); a batch is cut when
        the hold it needs exceeds the cap or the limit the launch queue taught. None where the clock holds nothing."""
        return None


class _Wrapped(Timer):
    """A clock that offers only the required members, as a Timer."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self.name = str(getattr(clock, "name", type(clock).__name__))

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        result: tuple[float, Any] = self._clock.first_call(fn)
        return result

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        return list(self._clock.time_each(fns))

    def describe(self) -> str:
        return str(self._clock.describe())


def as_timer(clock: Any) -> Timer:
    """clock as a Timer: itself when it is one, else wrapped (it must have first_call, time_each and describe)."""
    if isinstance(clock, Timer):
        return clock
    missing = [m for m in ("first_call", "time_each", "describe") if not callable(getattr(clock, m, None))]
    if missing:
        raise TypeError(f"speedgate: the timer {clock!r} lacks {', '.join(missing)} (see speedgate.timers.Timer)")
    return _Wrapped(clock)


class CpuTimer(Timer):
    """time.perf_counter_ns around each call; for plain Python and CPU torch work (which is synchronous)."""

    name = "cpu-monotonic"

    def __init__(self) -> None:
        from ..devices import CpuContention, involuntary_switches

        # Other users of the CPU during the timed calls (the run's summary says it), under this clock's label.
        self.contention = CpuContention(clocks=[self.name])
        self._switches = involuntary_switches

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        start = time.perf_counter_ns()
        out = fn()
        return (time.perf_counter_ns() - start) / 1e6, out

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        times, preempted = [], []
        clock, switches = time.perf_counter_ns, self._switches
        for fn in fns:
            before = switches()  # outside the timed span
            start = clock()
            fn()
            times.append((clock() - start) / 1e6)
            after = switches()
            preempted.append(0 if before is None or after is None else after - before)
        self.contention.batch(preempted)
        return times

    def describe(self) -> str:
        return "host monotonic clock (perf_counter_ns), one call per sample"


def median_event_ms(torch: Any, fn: Fn, calls: int = 7) -> float:
    """The median of `calls` calls of fn, each between two CUDA events on the current stream and waited for."""
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def spin_cycles_per_ms(torch: Any) -> float:
    """Clock cycles torch.cuda._sleep spins per millisecond on this GPU, measured now (median of 5 spins of ~1 ms)."""
    cycles = 2_000_000
    torch.cuda._sleep(cycles)  # a first launch, not timed
    return cycles / median_event_ms(torch, lambda: torch.cuda._sleep(cycles), calls=5)
