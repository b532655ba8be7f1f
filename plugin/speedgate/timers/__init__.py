"""Timing back ends: a monotonic host clock for CPU work, CUDA events with an L2 flush for GPU work; the Timer they
are, the kinds a run chooses from (TimerKind), and the one factory (make_timer)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .base import (
    PROFILED_CALLS,
    TIMER_CHOICES,
    CpuTimer,
    Fn,
    Timer,
    TimerKind,
    as_timer,
    median_event_ms,
    spin_cycles_per_ms,
)
from .cuda import PROFILE_HOLD_MS, CudaTimer, IdleStart
from .holds import (
    HOLD_CAP_MS,
    HOLD_MARGIN_MS,
    HOLD_SLACK,
    SYNC_PROBE_CAP_MS,
    SYNC_PROBES,
    device_floor_ms,
    hold_ms,
    learn_hold,
    wanted_hold_ms,
)

__all__ = ["HOLD_CAP_MS", "HOLD_MARGIN_MS", "HOLD_SLACK", "PROFILED_CALLS", "PROFILE_HOLD_MS", "SYNC_PROBE_CAP_MS",
           "SYNC_PROBES", "TIMER_CHOICES", "CpuTimer", "CudaTimer", "Fn", "IdleStart", "Timer", "TimerKind",
           "as_timer", "cuda_usable", "device_floor_ms", "hold_ms", "learn_hold", "make_timer", "median_event_ms",
           "spin_cycles_per_ms", "wanted_hold_ms"]


def cuda_usable() -> bool:
    """True when torch is already imported and sees a GPU. Never imports torch itself."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver reads as "no GPU" here; an explicit --speedgate-timer=cuda says why
        return False


def _cuda_timer() -> Timer:
    import torch

    return CudaTimer(torch)


# What each kind of clock is made by (AUTO is resolved first, in make_timer).
FACTORIES: dict[TimerKind, Callable[[], Timer]] = {TimerKind.CPU: CpuTimer, TimerKind.CUDA: _cuda_timer}


def make_timer(kind: TimerKind | str) -> Timer:
    """The timer of a kind (--speedgate-timer); AUTO picks CUDA events when torch sees a GPU, else the host clock."""
    try:
        kind = TimerKind(kind)
    except ValueError:
        raise ValueError(f"unknown timer {kind!r}; choose one of {', '.join(TIMER_CHOICES)}") from None
    if kind is TimerKind.AUTO:
        kind = TimerKind.CUDA if cuda_usable() else TimerKind.CPU
    return FACTORIES[kind]()
