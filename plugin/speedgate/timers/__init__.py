"""Timing back ends: a monotonic host clock for CPU work, CUDA events with an L2 flush for GPU work; the Timer they
are, and the choice between them (make_timer)."""

from __future__ import annotations

import sys

from .base import PROFILED_CALLS, TIMER_CHOICES, CpuTimer, Fn, Timer, as_timer, median_event_ms, spin_cycles_per_ms
from .cuda import PROFILE_HOLD_MS, CudaTimer, IdleStart
from .holds import (
    HOLD_CAP_MS,
    HOLD_MARGIN_MS,
    HOLD_SLACK,
    SYNC_PROBE_CAP_MS,
    device_floor_ms,
    hold_ms,
    learn_hold,
    wanted_hold_ms,
)

__all__ = ["HOLD_CAP_MS", "HOLD_MARGIN_MS", "HOLD_SLACK", "PROFILED_CALLS", "PROFILE_HOLD_MS", "SYNC_PROBE_CAP_MS", "TIMER_CHOICES", "CpuTimer", "CudaTimer",
           "Fn", "IdleStart", "Timer", "as_timer", "cuda_usable", "device_floor_ms", "hold_ms", "learn_hold",
           "make_timer", "median_event_ms", "spin_cycles_per_ms", "wanted_hold_ms"]


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
