"""Timing back ends: a monotonic host clock for CPU work, CUDA events with an L2 flush for GPU work."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

Fn = Callable[[], Any]

TIMER_CHOICES = ("auto", "cpu", "cuda")

# Calls traced by the profiler once per side after the rounds (CudaTimer.profile_calls): enough for a median that a
# clock step in one call does not move. The first trace in a process costs about 4.5 s, later ones milliseconds.
PROFILED_CALLS = 10
# Clock cycles of the spin kernel that holds the device while the host queues the profiled calls: about 30 ms at
# the H100's 1.98 GHz, several times what queueing 10 calls of a launch-heavy eager side took there.
HOLD_CYCLES = 60_000_000


class Timer(Protocol):
    """What the measurement loop needs from a clock."""

    name: str

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        """Run fn once, synchronised, and return (milliseconds, its result)."""

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        """Run each fn once, in order, and return each one's milliseconds."""

    def describe(self) -> str:
        """One line for reports: what is timed and how."""


class CpuTimer:
    """time.perf_counter_ns around each call; for plain Python and CPU torch work (which is synchronous)."""

    name = "cpu-monotonic"

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        start = time.perf_counter_ns()
        out = fn()
        return (time.perf_counter_ns() - start) / 1e6, out

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        times = []
        clock = time.perf_counter_ns
        for fn in fns:
            start = clock()
            fn()
            times.append((clock() - start) / 1e6)
        return times

    def describe(self) -> str:
        return "host monotonic clock (perf_counter_ns), one call per sample"


class CudaTimer:
    """CUDA events around each call on the current stream, with the L2 cache flushed before every call.

    The flush writes a buffer twice the size of the device's L2 so that no input of the timed call is
    still cached from the previous call; the flush itself lies outside the events. It runs on a stream of
    its own that the timed stream waits for (so a profiler trace can tell the flush from the work: see
    `profile_calls`). Events of a batch are read after one synchronisation, so the host does not stall
    between calls.
    """

    name = "cuda-events"

    def __init__(self, torch: Any) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("speedgate: the CUDA timer was asked for, but torch.cuda.is_available() is False")
        self._torch = torch
        device = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or 64 * 2**20
        self.l2_bytes = l2_bytes
        self._flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)
        self._flush_stream = torch.cuda.Stream(device=device)
        self.device_name = props.name
        self.properties = {
            "sm_count": int(props.multi_processor_count),
            "l2_mib": l2_bytes // 2**20,
            "compute_capability": f"{props.major}.{props.minor}",
        }

    def _sync(self) -> None:
        self._torch.cuda.synchronize()

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        self._sync()
        start = time.perf_counter_ns()
        out = fn()
        self._sync()
        return (time.perf_counter_ns() - start) / 1e6, out

    def _flush_l2(self) -> None:
        """Write the flush buffer on the flush stream, after the timed stream's work so far; the timed stream waits."""
        cuda = self._torch.cuda
        timed = cuda.current_stream()
        self._flush_stream.wait_stream(timed)
        with cuda.stream(self._flush_stream):
            self._flush.zero_()
        timed.wait_stream(self._flush_stream)

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        event = self._torch.cuda.Event
        pairs = [(event(enable_timing=True), event(enable_timing=True)) for _ in fns]
        for fn, (start, end) in zip(fns, pairs):
            self._flush_l2()
            start.record()
            fn()
            end.record()
        self._sync()
        return [start.elapsed_time(end) for start, end in pairs]

    def graphed(self, fn: Fn) -> Fn:
        """fn captured into a CUDA graph (after two calls on a side stream, as capture requires); returns replay.

        The outputs of the captured call stay alive in the graph's memory pool as long as the replay does.
        """
        torch = self._torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = fn()
        replay = graph.replay

        def run() -> Any:
            replay()
            return outputs

        return run

    def profile_calls(self, fn: Fn, calls: int = PROFILED_CALLS) -> dict[str, float]:
        """`calls` calls of fn timed exactly as the rounds time them (flush, events, call), under torch.profiler.

        Returns the events' median over these calls (`events_ms`); the device's busy time per call on every stream
        but the flush's, median over the calls (`busy_ms`: what the events should have seen, give or take the launch
        latency); and the busy time of all the work over the number of calls (`all_streams_ms`: it includes work
        that ran on another stream beside a later call, which the events never saw).
        """
        import statistics
        import warnings

        from torch.profiler import ProfilerActivity, profile

        from .integrity import profiled_busy

        torch = self._torch
        torch.cuda.synchronize()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle": one cycle here
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                # The profiler slows the host's launches; a spin kernel first (on the flush stream, which the
                # trace leaves out) holds the device while the host queues the calls, so that the events time the
                # device's work, not the host's launch rate under the profiler. As in the rounds, where the host
                # runs ahead of the device.
                with torch.cuda.stream(self._flush_stream):
                    torch.cuda._sleep(HOLD_CYCLES)
                events = statistics.median(self.time_each([fn] * calls))
        device = torch.autograd.DeviceType.CUDA
        traced = [(e.time_range.start, e.time_range.end, getattr(e, "device_resource_id", None))
                  for e in prof.events() if e.device_type == device]
        return {"events_ms": events, **profiled_busy(traced, calls)}

    def describe(self) -> str:
        return (
            f"CUDA events on {self.device_name}, L2 flushed before each call "
            f"({2 * self.l2_bytes // 2**20} MiB written), one call per sample"
        )


def cuda_usable() -> bool:
    """True when torch is already imported and sees a GPU. Never imports torch itself."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver reads as "no GPU" here; an explicit --speedgate-timer=cuda says why
        return False


def make_timer(kind: str) -> Timer:
    """Build the timer named by --speedgate-timer; 'auto' picks CUDA events when torch sees a GPU."""
    if kind not in TIMER_CHOICES:
        raise ValueError(f"unknown timer {kind!r}; choose one of {', '.join(TIMER_CHOICES)}")
    if kind == "cpu" or (kind == "auto" and not cuda_usable()):
        return CpuTimer()
    import torch

    return CudaTimer(torch)
