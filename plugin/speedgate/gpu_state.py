"""The GPU's state through NVML (clocks, throttle reasons, other processes): is this a fair moment to time?

Read once when timing starts (reported in the summary's header) and after each comparison's rounds (reported on
that case when something was slowing the card down). Takes the pynvml module as an argument so tests can fake it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# Reasons that are not a problem for a measurement: an idle GPU, clocks pinned by the administrator, sync boost.
_BENIGN = {"gpu-idle", "applications-clocks", "sync-boost"}
_REASONS = (
    ("GpuIdle", "gpu-idle"),
    ("ApplicationsClocksSetting", "applications-clocks"),
    ("SwPowerCap", "sw-power-cap"),
    ("HwSlowdown", "hw-slowdown"),
    ("SyncBoost", "sync-boost"),
    ("SwThermalSlowdown", "sw-thermal-slowdown"),
    ("HwThermalSlowdown", "hw-thermal-slowdown"),
    ("HwPowerBrakeSlowdown", "hw-power-brake"),
    ("DisplayClockSetting", "display-clocks"),
)


@dataclass
class GpuState:
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    reasons: list[str] = field(default_factory=list)
    other_processes: int = 0

    @property
    def concerns(self) -> list[str]:
        """What could have slowed a measurement: active throttle reasons, other processes on the device."""
        out = [r for r in self.reasons if r not in _BENIGN]
        if self.other_processes:
            out.append(f"{self.other_processes} other process(es) on the GPU")
        return out

    def describe(self) -> str:
        clocks = f"SM {self.sm_clock_mhz}/{self.max_sm_clock_mhz} MHz" if self.sm_clock_mhz is not None else "SM clock unknown"
        power = f"{self.power_w:.0f}/{self.power_limit_w:.0f} W" if self.power_w is not None and self.power_limit_w else "power unknown"
        reasons = ", ".join(self.reasons) or "none"
        return f"{clocks}, {self.temperature_c} C, {power}, clock-event reasons: {reasons}, other processes: {self.other_processes}"

    def to_json(self) -> dict[str, Any]:
        return {
            "sm_clock_mhz": self.sm_clock_mhz, "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "temperature_c": self.temperature_c, "power_w": self.power_w, "power_limit_w": self.power_limit_w,
            "reasons": list(self.reasons), "other_processes": self.other_processes,
        }


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # a query this driver or device does not support: leave that field unknown
        return None


def read(pynvml: Any, handle: Any) -> GpuState:
    state = GpuState()
    state.sm_clock_mhz = _try(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    state.max_sm_clock_mhz = _try(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
    state.temperature_c = _try(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    power = _try(pynvml.nvmlDeviceGetPowerUsage, handle)
    limit = _try(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    state.power_w = power / 1000 if power is not None else None
    state.power_limit_w = limit / 1000 if limit is not None else None
    # NVML renamed "clocks throttle reasons" to "clocks event reasons"; accept either spelling.
    get_reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    mask = _try(get_reasons, handle) if get_reasons else None
    if mask is not None:
        for suffix, name in _REASONS:
            bit = getattr(pynvml, f"nvmlClocksEventReason{suffix}", None)
            if bit is None:
                bit = getattr(pynvml, f"nvmlClocksThrottleReason{suffix}", None)
            if bit is not None and mask & bit:
                state.reasons.append(name)
    procs = _try(pynvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    state.other_processes = sum(1 for p in procs if getattr(p, "pid", None) != os.getpid())
    return state


_POLICIES = (("NVML_PERF_POLICY_POWER", "power"), ("NVML_PERF_POLICY_THERMAL", "thermal"))


def violation_ns(pynvml: Any, handle: Any) -> dict[str, int]:
    """NVML's cumulative nanoseconds the clocks were held down, per policy (power cap, thermal)."""
    out = {}
    for const, name in _POLICIES:
        policy = getattr(pynvml, const, None)
        status = _try(pynvml.nvmlDeviceGetViolationStatus, handle, policy) if policy is not None else None
        if status is not None:
            out[name] = int(status.violationTime)
    return out


def throttled_fractions(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    """The fraction of a measurement's wall time that each policy held the clocks down."""
    if seconds <= 0:
        return {}
    return {name: (after[name] - before[name]) / 1e9 / seconds for name in after if name in before}


THERMAL = ("sw-thermal-slowdown", "hw-thermal-slowdown")
# The longest the gate waits for a thermally throttled GPU to cool before it times (at the run's first timing, and
# before re-measuring a regression whose measurement the heat held down): a bound on the delay, not a measured
# cooling time; what each wait saw is printed where it happened.
COOL_WAIT_S = 60.0


def thermally_throttled(state: GpuState) -> bool:
    """Whether NVML names heat among the reasons the GPU's clocks are held down now."""
    return any(r in THERMAL for r in state.reasons)


@dataclass
class Cooling:
    """What a wait for the GPU to cool saw: seconds waited, the state before and after, and whether it cooled."""

    waited_s: float
    before: GpuState
    after: GpuState

    @property
    def cooled(self) -> bool:
        return not thermally_throttled(self.after)

    def describe(self) -> str:
        temps = f"{self.before.temperature_c} C -> {self.after.temperature_c} C"
        if self.cooled:
            return f"waited {self.waited_s:.0f} s for the GPU to cool ({temps})"
        return f"the GPU was still thermally throttled after {self.waited_s:.0f} s ({temps}): verdicts are suspect"


def wait_until_cool(read_state: Any, limit_s: float = COOL_WAIT_S, *, poll_s: float = 1.0,
                    sleep: Any = None, clock: Any = None) -> Cooling | None:
    """None if the GPU is not thermally throttled now; else poll read_state() every poll_s until it is not, or
    limit_s has passed, and say what was seen. The GPU is idle while this waits."""
    import time

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    before = read_state()
    if not thermally_throttled(before):
        return None
    start, state = clock(), before
    while thermally_throttled(state) and clock() - start < limit_s:
        sleep(poll_s)
        state = read_state()
    return Cooling(clock() - start, before, state)


def cool_before(again: Any, read_state: Any, thermal_fraction: float, threshold: float, notes: list[str],
                **wait: Any) -> Any:
    """again, made to wait first for the GPU to cool (wait_until_cool) when heat held it down for more than threshold
    of the measurement being re-done; what the wait saw goes to notes."""
    if read_state is None or thermal_fraction <= threshold:
        return again

    def cooled_again() -> Any:
        cooling = wait_until_cool(read_state, **wait)
        if cooling is not None:
            notes.append(cooling.describe())
        return again()

    return cooled_again


class Monitor:
    """An NVML handle on the GPU this process times on; None-safe when NVML is missing."""

    def __init__(self, token: str) -> None:
        import pynvml

        from .hardware import _nvml_handle

        pynvml.nvmlInit()
        self._pynvml = pynvml
        self._handle = _nvml_handle(pynvml, token)

    def read(self) -> GpuState:
        return read(self._pynvml, self._handle)

    def violations(self) -> dict[str, int]:
        return violation_ns(self._pynvml, self._handle)

    def energy_mj(self) -> int | None:
        """The card's energy counter (millijoules since the driver loaded); None where the device has none."""
        return _try(self._pynvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)

    def sm_clock_mhz(self) -> int | None:
        return _try(self._pynvml.nvmlDeviceGetClockInfo, self._handle, self._pynvml.NVML_CLOCK_SM)


def open_monitor(token: str) -> Monitor | None:
    try:
        return Monitor(token)
    except Exception:  # no NVML, or the device cannot be opened: the gate runs without a state check
        return None
