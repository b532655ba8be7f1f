"""The GPU clock: CUDA events around each call, the L2 flushed before it, the device held while the host queues a
batch; and the same clock with every call started on an idle device (IdleStart)."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .base import PROFILED_CALLS, Fn, Timer, median_event_ms, spin_cycles_per_ms
from .holds import (
    HOLD_CAP_MS,
    HOLD_MARGIN_MS,
    SYNC_PROBE_CAP_MS,
    SYNC_PROBE_MS,
    SYNC_PROBES,
    device_floor_ms,
    hold_ms,
    learn_hold,
    wanted_hold_ms,
)

# The spin kernel that holds the device while the host queues the profiled calls: 30 ms first, several times what
# queueing 10 calls of a single-kernel side takes under the profiler. When the host still fell behind (a
# launch-bound model: 10 calls took longer), the calls are traced again behind twice the host's queueing time, up
# to PROFILE_HOLD_CAP_MS.
PROFILE_HOLD_MS = 30.0
PROFILE_HOLD_CAP_MS = 2000.0
PROFILE_TRIES = 3

# Every trace of profiled calls holds at least the hold's spin kernel. One that holds no device activity at all was
# lost by the profiler, not skipped by the side: with TEARDOWN_CUPTI=1, an earlier session's CUPTI teardown, which
# runs on a later CUDA call, can land inside the next session and leave it empty (pytorch/kineto#1554). Sessions
# opened back to back are where it lands: queued_ahead's tries of one side, and a trace after a lost one. Before
# each such session the device synchronizes, TEARDOWN_SETTLE_S passes and it synchronizes again (the pending
# teardown's call). A trace still empty is taken again, LOST_TRACE_TRIES in all, then the audit stops with LostTrace,
# never reading it as a side that launched nothing (docs/results/gate-study-h200.md, the ninth and tenth studies).
LOST_TRACE_TRIES = 3
TEARDOWN_SETTLE_S = 0.2

# Kineto leaves CUPTI attached after a trace unless TEARDOWN_CUPTI=1 (pytorch/pytorch#144455), which can cost a
# process's later launches host time: the audit asks for the teardown, so that its trace leaves the process as it
# found it (what launch-bound passes did around the audit: docs/results/gate-study.md, section 5). A value already
# set (by the user, or by torch itself where CUDA graphs cannot survive the teardown) is left as it is.
CUPTI_TEARDOWN_ENV = "TEARDOWN_CUPTI"


def ask_cupti_teardown(environ: Any = None) -> str:
    """Set TEARDOWN_CUPTI=1 in environ (os.environ) unless it holds a value; returns the value in effect."""
    import os

    env = os.environ if environ is None else environ
    return str(env.setdefault(CUPTI_TEARDOWN_ENV, "1"))


class LostTrace(RuntimeError):
    """The profiler recorded no device activity, not even its own hold's spin kernel, in every try."""


def traced_intervals(prof: Any, device_type: Any) -> list[tuple[float, float, Any]]:
    """(start us, end us, stream) of each activity of device_type in a finished torch.profiler trace.

    Read from the trace's raw events where this torch has them: the profiler's own events() builds an object and a
    call tree for every event, on a large model about as long as the profiled calls themselves, where the raw
    events take a small fraction of that (docs/results/suite-time.md); the audit needs three numbers of each. The
    two give the same intervals, but for a constant offset (events() counts from the trace's start)."""
    raw = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if raw is not None:
        try:
            return [(e.start_ns() / 1e3, e.end_ns() / 1e3, e.device_resource_id()) for e in raw.events()
                    if e.device_type() == device_type]
        except (AttributeError, TypeError):  # a torch whose raw events lack one of these: its events() below
            pass
    return [(e.time_range.start, e.time_range.end, getattr(e, "device_resource_id", None))
            for e in prof.events() if e.device_type == device_type]


def device_events(prof: Any) -> list[dict[str, Any]]:
    """The device's activities (kernels, memsets, copies) of a finished torch.profiler trace, in the order they
    started, as the profiler's chrome trace holds them (name, ts, dur, and args: stream, grid, block, registers...).

    Read from the trace's own file, where this torch's raw events leave the launch facts empty (torch 2.11): exported
    once, a few kilobytes. [] when the trace cannot be exported."""
    import json
    import os
    import tempfile

    try:
        fd, path = tempfile.mkstemp(suffix=".json", prefix="speedgate-trace-")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
    except Exception:  # a torch whose trace cannot be exported
        return []
    return sorted((e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
                   and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")), key=lambda e: e.get("ts", 0))


def traced_kernels(prof: Any) -> list[dict[str, Any]]:
    """The kernels of a finished torch.profiler trace of profiled calls, as speedgate.codegen's facts (name, grid,
    block, registers, shared memory, and each one's share of the kernels' time), the flush stream's left out (its
    first activity: the hold's spin kernel); [] when the trace cannot be read (device_events)."""
    import json

    from ..codegen import trace_kernels

    events = device_events(prof)
    if not events:
        return []
    flush_stream = (events[0].get("args") or {}).get("stream")
    kernels = [(str(e.get("name")), (e.get("args") or {}).get("stream"), json.dumps(e.get("args") or {}), e.get("dur"))
               for e in events if e.get("cat") == "kernel"]
    return trace_kernels(kernels, skip_stream=flush_stream)


class CudaTimer(Timer):
    """CUDA events around each call on the current stream, with the L2 cache flushed before every call.

    The flush writes a buffer twice the size of the device's L2 so that no input of the timed call is
    still cached from the previous call; the flush itself lies outside the events. It runs on a stream of
    its own that the timed stream waits for (so a profiler trace can tell the flush from the work: see
    `profile_calls`). Events of a batch are read after one synchronisation, so the host does not stall
    between calls.

    Before each batch a spin kernel holds the device while the host queues the batch's calls, long enough that
    the host stays ahead of the device: the events then time the device's work, never the host's launches, which
    for a side whose launch costs as much as its kernel would differ from process to process
    (docs/results/plugin-constants.md).
    """

    name = "cuda-events-held"
    can_graph = True
    can_profile = True
    sustains = True
    on_gpu = True

    def __init__(self, torch: Any, lockstep: bool = False) -> None:
        """lockstep: every probe of synchronizes runs whatever the earlier ones said, so that ranks whose sides are
        collectives queue the same calls (speedgate.distributed)."""
        if not torch.cuda.is_available():
            raise RuntimeError("speedgate: the CUDA timer was asked for, but torch.cuda.is_available() is False")
        self._torch = torch
        self.lockstep = lockstep
        device = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or 64 * 2**20
        self.l2_bytes = l2_bytes
        self._flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)
        self._flush_stream = torch.cuda.Stream(device=device)
        # Two events reused by every flush: the flush waits for the timed stream's work, the timed stream for the flush.
        self._timed_done = torch.cuda.Event()
        self._flushed = torch.cuda.Event()
        self._hold_ended = torch.cuda.Event()  # recorded after each hold: still pending once all is queued = ahead
        self.device_name = props.name
        self.properties = {
            "sm_count": int(props.multi_processor_count),
            "l2_mib": l2_bytes // 2**20,
            "compute_capability": f"{props.major}.{props.minor}",
        }
        self.cycles_per_ms = spin_cycles_per_ms(torch)
        self.flush_ms = median_event_ms(torch, self._flush.zero_, calls=5)
        # What the held batches of the comparison being measured showed (learn_hold; reset by for_sides). A limit is
        # taken only when two learning batches in a row teach one (_pending_limit holds the first), so that one stall
        # of the host cannot cut the rest of a comparison into pieces, each call behind its own hold: a regime in
        # which a side times otherwise (docs/results/gate-study-h200.md, "Two more fresh cards under -n 2").
        self._behind_per_call = 0.0
        self._hold_limit = HOLD_CAP_MS
        self._pending_limit: float | None = None
        self.clock = time.perf_counter  # the host clock that measures how long the host takes to queue a batch
        # The last held batch: whether the hold was still running when the host had queued it all, and how long
        # the queueing took (ms).
        self.last_ahead = True
        self.last_queued_ms = 0.0
        # Whether the device caught up with the host in the last held batch (outrun); None after an idle-start one.
        self._last_outrun: bool | None = None
        # How many pieces the last held batch was cut into, each behind its own hold (pieces); None after an idle one.
        self._last_pieces: int | None = None
        # The sides of the comparison being measured that synchronize inside (for_sides): no hold puts the host
        # ahead of them, so their profiled calls are not traced again behind a longer one.
        self._waiting: set[int] = set()

    def _sync(self) -> None:
        self._torch.cuda.synchronize()

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        self._sync()
        start = time.perf_counter_ns()
        out = fn()
        self._sync()
        return (time.perf_counter_ns() - start) / 1e6, out

    def _flush_l2(self, timed: Any) -> None:
        """Write the flush buffer on the flush stream, after the timed stream's work so far; the timed stream waits."""
        cuda = self._torch.cuda
        self._timed_done.record(timed)
        self._flush_stream.wait_event(self._timed_done)
        cuda.set_stream(self._flush_stream)
        try:
            self._flush.zero_()
        finally:
            cuda.set_stream(timed)
        self._flushed.record(self._flush_stream)
        timed.wait_event(self._flushed)

    def hold(self, ms: float) -> None:
        """A spin kernel of about ms milliseconds on the flush stream: the next flush, and so the next call, waits."""
        cuda = self._torch.cuda
        timed = cuda.current_stream()
        self._flush_stream.wait_stream(timed)
        cuda.set_stream(self._flush_stream)
        try:
            cuda._sleep(max(1, round(ms * self.cycles_per_ms)))
            self._hold_ended.record(self._flush_stream)
        finally:
            cuda.set_stream(timed)

    def time_each(self, fns: Sequence[Fn], hold: float | None = None, idle: bool = False,
                  rendezvous: Fn | None = None) -> list[float]:
        """Each fn once, in order, between events, after an L2 flush; the device held first (hold ms, or sized from
        the last batch so that the host stays ahead). idle=True: no hold; the host waits for the device before each
        call, so each call starts on an idle device and its events include its host work (see IdleStart).

        rendezvous, when given (and not idle), is called untimed on the timed stream right after the hold: for calls
        that must start together on several devices (speedgate.distributed), a collective that ends on every device
        at once, whenever each one's hold ended. Such a batch is never cut in pieces: each device learns its own
        hold, and every device must run the same collectives in the same order."""
        cuda = self._torch.cuda
        learning = hold is None and not idle
        if learning and len(fns) > 1 and rendezvous is None:
            # A hold longer than the cap, or than the launch queue covers (learn_hold's limit): the batch in pieces,
            # each behind its own.
            needed = wanted_hold_ms(self._behind_per_call, len(fns))
            allowed = min(self._hold_limit, HOLD_CAP_MS)
            if needed > allowed:
                share = (allowed - HOLD_MARGIN_MS) / max(needed - HOLD_MARGIN_MS, 1e-9)
                piece = max(1, int(len(fns) * share))
                if piece < len(fns):
                    times, outrun = [], False
                    for i in range(0, len(fns), piece):
                        times += self.time_each(fns[i:i + piece])
                        outrun = outrun or bool(self._last_outrun)
                    self._last_outrun = outrun  # the batch was outrun if any piece was
                    self._last_pieces = -(-len(fns) // piece)
                    return times
        held = hold_ms(self._behind_per_call, len(fns), self._hold_limit) if hold is None else hold
        timed = cuda.current_stream()
        if not idle:
            self.hold(held)
            if rendezvous is not None:
                timed.wait_event(self._hold_ended)
                rendezvous()
        pairs = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in fns]
        clock = self.clock
        marks = []
        collecting = gc.isenabled()
        gc.disable()  # no collection while the host queues the batch (its pause would read as the host's pace)
        try:
            queued = clock()
            for fn, (start, end) in zip(fns, pairs):
                self._flush_l2(timed)
                if idle:
                    self._sync()
                start.record()
                fn()
                end.record()
                marks.append(clock())
        finally:
            if collecting:
                gc.enable()
        # Outrun: the next-to-last call had already ended when the host had queued the last one, so the device had
        # caught up with the host and waited for it (a hold ends before the host is done by design: sized so that the
        # device, which starts then, still finishes after the host).
        self._last_outrun = None if idle else len(pairs) > 1 and bool(pairs[-2][1].query())
        self._last_pieces = None if idle else 1
        if not idle:
            self.last_ahead = not self._hold_ended.query()
            self.last_queued_ms = (marks[-1] - queued) * 1e3 if marks else 0.0
        self._sync()
        times = [start.elapsed_time(end) for start, end in pairs]
        if learning:
            behind, limit = learn_hold([(m - queued) * 1e3 for m in marks], device_floor_ms(fns, times, self.flush_ms),
                                       held, [id(fn) for fn in fns])
            if behind is not None:
                self._behind_per_call = behind
            if limit is not None and self._pending_limit is not None:
                self._hold_limit = max(limit, self._pending_limit)  # the second batch in a row that waited
            self._pending_limit = limit
        return times

    def outrun(self) -> bool | None:
        return self._last_outrun

    def pieces(self) -> int | None:
        return self._last_pieces

    def synchronizes(self, fn: Fn) -> bool:
        """Whether a call of fn makes the host wait for the device (an .item(), a .cpu(), a synchronize inside).

        Behind a hold several times its own length, a call that does not wait returns long before the hold ends;
        one that waits returns after it. Holding cannot put the host ahead of such a call. It waits only where every
        one of SYNC_PROBES probes says so: a host stalled during one probe is no wait. The probes stop at the first
        that says no, unless the timer is in lockstep (then every one runs).
        """
        if self.lockstep:
            return all([self._waits_once(fn) for _ in range(SYNC_PROBES)])
        return all(self._waits_once(fn) for _ in range(SYNC_PROBES))

    def _waits_once(self, fn: Fn) -> bool:
        """One probe of synchronizes: fn called once plain, then once behind a hold."""
        cuda = self._torch.cuda
        self._sync()
        started = self.clock()
        fn()
        plain_ms = (self.clock() - started) * 1e3  # on an idle device: its host work, plus the device's if it waits
        self._sync()
        hold = max(SYNC_PROBE_MS, min(4 * plain_ms, SYNC_PROBE_CAP_MS))
        self.hold(hold)
        self._flush_l2(cuda.current_stream())  # the timed stream now waits for the hold
        started = self.clock()
        fn()
        waited_ms = (self.clock() - started) * 1e3
        self._sync()
        return waited_ms >= hold / 2

    def for_sides(self, reference: Fn, optimized: Fn, latency: bool = False, replayed: bool = False) -> Timer:
        """The timer for the rounds of these two sides: this one, or IdleStart when the case asks for latency or a
        side synchronizes (a hold would only leave the device idle while that side waits for it).

        replayed: the rounds time CUDA graph replays of the sides (graph=True), one launch a call, which never makes
        the host wait (a side that synchronizes cannot be captured), so the sides are not probed. Probed as given, a
        compiled side with milliseconds of host work a call read as waiting in one process and not in others, and
        its held entry's comparison went unjudged (docs/results/gate-study-h200.md, "the fourteenth study")."""
        self._behind_per_call, self._hold_limit, self._pending_limit = 0.0, HOLD_CAP_MS, None  # learnt anew for these sides
        probed = () if replayed else (reference, optimized)
        self._waiting = {id(fn) for fn in probed if self.synchronizes(fn)}
        if latency:
            return IdleStart(self, "latency=True")
        for side, fn in (("reference", reference), ("optimized", optimized)):
            if id(fn) in self._waiting:
                return IdleStart(self, f"the {side} side makes the host wait for the device: it synchronizes, or "
                                       "launches more than the launch queue holds")
        return self

    def in_cycles(self) -> Timer | None:
        from .cycles import counting_cycles

        return counting_cycles(self, self._torch)

    def graphed(self, fn: Fn) -> Fn:
        return capture_graph(self._torch, fn)

    def queued_ahead(self, fns: Sequence[Fn], context: Callable[[], Any]) -> tuple[list[float], Any]:
        """time_each(fns) inside context(), behind a hold long enough that the host queued every call before the
        device started the first: PROFILE_HOLD_MS, then (up to PROFILE_TRIES times) twice the host's queueing time.
        Returns the times and the last context entered (the profiler, whose trace is of the last try)."""
        hold = PROFILE_HOLD_MS
        for _ in range(PROFILE_TRIES):
            with context() as entered:
                times = self.time_each(fns, hold=hold)
            if self.last_ahead or hold >= PROFILE_HOLD_CAP_MS or any(id(fn) in self._waiting for fn in fns):
                break
            hold = min(PROFILE_HOLD_CAP_MS, 2 * self.last_queued_ms)
        return times, entered

    def profile_calls(self, fn: Fn, calls: int = PROFILED_CALLS) -> dict[str, Any]:
        """`calls` calls of fn timed exactly as the rounds time them (flush, events, call), under torch.profiler.

        Returns the events' median over these calls (`events_ms`); the device's busy time per call on every stream
        but the flush's, median over the calls (`busy_ms`: what the events should have seen, give or take the launch
        latency); the busy time of all the work over the number of calls (`all_streams_ms`: it includes work
        that ran on another stream beside a later call, which the events never saw); the kernels launched; and how
        many traces the profiler lost before one recorded the calls (`lost`).
        """
        import warnings

        from torch.profiler import ProfilerActivity, profile

        from ..integrity import profiled_busy

        torch = self._torch
        ask_cupti_teardown()

        opened = 0

        def tracing() -> Any:
            """A profiler session; one opened after another (queued_ahead's next try, a try after a lost trace)
            waits for the device to settle first, so that the last one's pending teardown lands here, not inside."""
            nonlocal opened
            if opened:
                torch.cuda.synchronize()
                time.sleep(TEARDOWN_SETTLE_S)
            torch.cuda.synchronize()
            opened += 1
            return profile(activities=[ProfilerActivity.CUDA])

        lost = 0
        for _ in range(LOST_TRACE_TRIES):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle": one cycle here
                # The profiler slows the host's launches: a hold of its own (the spin runs on the flush stream,
                # which the trace leaves out), not one sized from the rounds' batches.
                times, prof = self.queued_ahead([fn] * calls, tracing)
            traced = traced_intervals(prof, torch.autograd.DeviceType.CUDA)
            if traced:
                break
            lost += 1
        else:
            raise LostTrace(f"speedgate: the profiler recorded no device activity in {LOST_TRACE_TRIES} traces of "
                            f"this side, not even the spin kernel each one starts with: CUPTI lost them (with "
                            f"TEARDOWN_CUPTI=1, an earlier trace's teardown can land inside the next one), so the "
                            f"audit cannot say what the side launched. Run the test again; if it persists, set "
                            f"TEARDOWN_CUPTI=0")
        events = statistics.median(times)
        return {"events_ms": events, **profiled_busy(traced, calls), "kernels": traced_kernels(prof), "lost": lost}

    def describe(self) -> str:
        return (
            f"CUDA events on {self.device_name}, L2 flushed before each call "
            f"({2 * self.l2_bytes // 2**20} MiB written), one call per sample"
        )


class IdleStart(Timer):
    """CudaTimer with every call started on an idle device: the host waits for the device (after the flush) before
    each call, so the events time the call's host work (launches, Python, a graph break) together with its device work
    that does not overlap it. What one call costs from a standing start; used for cases about launch overhead
    (perf.compare(..., latency=True)) and for sides that synchronize inside (a hold cannot help those)."""

    name = "cuda-events-idle-start"

    def __init__(self, timer: CudaTimer, why: str) -> None:
        self._timer = timer
        self.why = why

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        return self._timer.first_call(fn)

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        return self._timer.time_each(fns, idle=True)

    def describe(self) -> str:
        return f"{self._timer.describe()}; each call started on an idle device ({self.why})"


def capture_graph(torch: Any, fn: Fn) -> Fn:
    """fn captured into a CUDA graph (after two calls on a side stream, as capture requires); returns replay.

    The outputs of the captured call stay alive in the graph's memory pool as long as the replay does.
    """
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
