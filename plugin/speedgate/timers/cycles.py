"""SM cycles around each timed call: the clock for heavy compute-bound pairs, which a card's frequency under its
power cap does not move.

At the power cap each card settles at its own SM clock, and each kernel of a pair runs at a clock of its own (the
one that draws more power, lower): in milliseconds an fp8 matmul's speedup over `_scaled_mm` moved between capped
and after idle, in cycles it stayed put (docs/results/blind-cases.md, "Why the headline cases were wide"). Cycles see
through the clock only for work at the SM's pace: a memory-bound kernel's cycles grow with the clock, so a side that
mixes both moves with it (docs/results/gate-study-h200.md, "The fused MLP's tile and the clock"). So a comparison whose
declared work is compute-bound and whose pair takes a millisecond or more is timed in cycles: a stamp kernel on the
timed stream right before and right after each call (inside the CUDA events, which still time the call) writes,
from one program per SM, the SM's id and its %clock64; matched by SM, after minus before is the call's length in
that SM's cycles (SM clocks need not agree with each other, only each with itself), the median over SMs its cycles.
Each sample is those cycles at the card's full SM clock, in milliseconds ("ms at full clock"), so the loop, the
budget and the reports read milliseconds as before; the events' own times and the clock each side ran at are kept
for the audits and the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import median
from typing import Any

from .base import PROFILED_CALLS, Fn, Timer

CYCLES_TIMER = "cuda-sm-cycles-held"
# A heavy compute-bound pair is counted in SM cycles when both its sides reach this share of the matmul ceiling in
# warm-up: tensor-core-bound, their time scales with the SM clock. On the H100 the suite's pairs fall in two groups,
# eager or compiled attention references at 0.01-0.2 and GEMM-like sides at 0.48 or more (docs/results/blind-cases.md).
CYCLES_MIN_PEAK = 0.4
SM_SLOTS = 1024  # %smid is below %nsmid, which is at most this on every NVIDIA GPU so far


def stamp_kernel() -> Any:
    """The stamp kernel, made on first use (Triton is imported only here): launched with one program per SM, each
    writes its (SM id, %clock64, %globaltimer) into row pid of a (programs, 3) int64 buffer."""
    import triton
    import triton.language as tl

    @triton.jit
    def _speedgate_stamp(out_ptr):
        pid = tl.program_id(0)
        zero = tl.zeros([1], tl.int32)
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [zero], dtype=tl.int32, is_pure=False, pack=1)
        clk = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [zero], dtype=tl.int64, is_pure=False, pack=1)
        ns = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [zero], dtype=tl.int64, is_pure=False,
                                       pack=1)
        offs = tl.arange(0, 1)
        tl.store(out_ptr + pid * 3 + offs, sm.to(tl.int64))
        tl.store(out_ptr + pid * 3 + 1 + offs, clk)
        tl.store(out_ptr + pid * 3 + 2 + offs, ns)

    return _speedgate_stamp


def stamped(kernel: Any, programs: int, fn: Fn, before: Any, after: Any) -> Fn:
    """fn with the stamp kernel launched right before it into `before` and right after it into `after`, on the same
    stream, so that cycles_of reads the cycles the call ran."""
    grid = (programs,)

    def call() -> Any:
        kernel[grid](before, num_warps=1)
        out = fn()
        kernel[grid](after, num_warps=1)
        return out

    return call


def cycles_of(stamps: Any, torch: Any) -> tuple[list[float], list[float]]:
    """(cycles, MHz) of each call from its two stamps: stamps is (calls, 2, programs, 3) int64, each row (SM id,
    %clock64, %globaltimer ns); per call the median over the SMs that ran a program of both stamps."""
    calls = stamps.shape[0]
    sm = stamps[..., 0].clamp(0, SM_SLOTS - 1)
    slots = torch.full((calls, 2, SM_SLOTS, 2), float("nan"), dtype=torch.float64, device=stamps.device)
    values = stamps[..., 1:].to(torch.float64)
    slots.scatter_(2, sm.unsqueeze(-1).expand(-1, -1, -1, 2), values)
    delta = slots[:, 1] - slots[:, 0]  # (calls, SM_SLOTS, 2): cycles and ns, NaN where an SM ran one stamp or none
    cycles = delta[..., 0].nanmedian(dim=1).values
    ns = delta[..., 1].nanmedian(dim=1).values
    mhz = cycles / ns * 1e3
    return [float(c) for c in cycles.cpu().tolist()], [float(f) for f in mhz.cpu().tolist()]


class SmCycles(Timer):
    """A CUDA timer's rounds counted in SM cycles (see the module): each sample is the call's cycles at the card's
    full SM clock, in ms; the CUDA timer still flushes the L2, holds the device and times the events."""

    name = CYCLES_TIMER
    can_graph = True
    can_profile = True
    sustains = True
    on_gpu = True

    def __init__(self, timer: Any, full_clock_mhz: float) -> None:
        import torch

        self._timer = timer
        self._torch = torch
        self.full_clock_mhz = float(full_clock_mhz)
        self._programs = int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
        self._kernel = stamp_kernel()
        self._buf = torch.zeros((1, 2, self._programs, 3), dtype=torch.int64, device="cuda")
        self._stamped(lambda: None, 0)()  # compiled and launched once here: a stack that cannot stamp fails now
        torch.cuda.synchronize()
        # id(fn) -> each timed call's events ms and the SM clock it ran at (MHz): the audits' and the report's.
        self.events: dict[int, list[float]] = {}
        self.clocks: dict[int, list[float]] = {}
        self.properties = getattr(timer, "properties", {})

    def _stamped(self, fn: Fn, index: int) -> Fn:
        return stamped(self._kernel, self._programs, fn, self._buf[index, 0], self._buf[index, 1])

    def first_call(self, fn: Fn) -> tuple[float, Any]:
        result: tuple[float, Any] = self._timer.first_call(fn)
        return result

    def time_each(self, fns: Sequence[Fn]) -> list[float]:
        torch = self._torch
        if self._buf.shape[0] < len(fns):
            self._buf = torch.zeros((len(fns), 2, self._programs, 3), dtype=torch.int64, device="cuda")
        times = self._timer.time_each([self._stamped(fn, i) for i, fn in enumerate(fns)])
        cycles, mhz = cycles_of(self._buf[:len(fns)], torch)
        for fn, event_ms, f in zip(fns, times, mhz):
            self.events.setdefault(id(fn), []).append(event_ms)
            self.clocks.setdefault(id(fn), []).append(f)
        return [c / (self.full_clock_mhz * 1e3) for c in cycles]

    def outrun(self) -> bool | None:
        found: bool | None = self._timer.outrun()
        return found

    def pieces(self) -> int | None:
        found: int | None = self._timer.pieces()
        return found

    def side(self, fn: Fn) -> tuple[float | None, float | None]:
        """(events' median ms, median SM clock in MHz) of fn's timed calls so far."""
        events, clocks = self.events.get(id(fn)), [f for f in self.clocks.get(id(fn), []) if f == f]
        return (median(events) if events else None, median(clocks) if clocks else None)

    def graphed(self, fn: Fn) -> Fn:
        graphed: Fn = self._timer.graphed(fn)
        return graphed

    def profile_calls(self, fn: Fn, calls: int = PROFILED_CALLS) -> dict[str, Any]:
        profiled: dict[str, Any] = self._timer.profile_calls(fn, calls)
        return profiled

    def describe(self) -> str:
        return (f"{self._timer.describe()}; counted in SM cycles between stamps around each call, as ms at the full "
                f"SM clock of {self.full_clock_mhz:.0f} MHz")


def full_clock_mhz(torch: Any) -> float | None:
    """The current GPU's full (maximum) SM clock in MHz, from NVML (None where NVML cannot tell)."""
    try:
        import pynvml

        from ..hardware import _nvml_handle, visible_gpu_tokens

        pynvml.nvmlInit()
        tokens = visible_gpu_tokens()
        index = torch.cuda.current_device()
        handle = _nvml_handle(pynvml, tokens[index] if index < len(tokens) else str(index))
        return float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # no NVML, an odd CUDA_VISIBLE_DEVICES: the timer stays in milliseconds
        return None


def counts_cycles(warm: list[float], compute_floor_ms: float | None, heavy_ms: float) -> bool:
    """Whether a pair is timed in SM cycles (timers.cycles): its declared work is compute-bound (a floor given), it
    takes heavy_ms or more (a power-capped GPU runs it at its capped clock: measure.warm_up), and in its warm-up
    calls (reference and optimized alternating) both sides did that work at CYCLES_MIN_PEAK of the matmul ceiling
    or more, so that both times are the tensor cores' and scale with the SM clock. An eager reference or a whole
    model, whose memory-bound kernels do not scale with it, keeps the pair in milliseconds."""
    if not compute_floor_ms or len(warm) < 2:
        return False
    reference, optimized = median(warm[0::2]), median(warm[1::2])
    return reference + optimized >= heavy_ms and compute_floor_ms / max(reference, optimized) >= CYCLES_MIN_PEAK


def counting_cycles(timer: Any, torch: Any, make: Callable[[Any, float], Timer] = SmCycles) -> Timer | None:
    """An SmCycles around a held CUDA timer (CudaTimer.in_cycles), or None where cycles cannot be counted (no
    Triton, no NVML)."""
    mhz = full_clock_mhz(torch)
    if not mhz:
        return None
    try:
        return make(timer, mhz)
    except Exception:  # no Triton, or a stack whose compiler cannot build the stamp: the rounds stay in milliseconds
        return None


__all__ = ["CYCLES_MIN_PEAK", "CYCLES_TIMER", "SmCycles", "counting_cycles", "counts_cycles", "cycles_of", "full_clock_mhz",
           "stamp_kernel", "stamped"]
