"""The GPU-state check against a fake NVML."""

from __future__ import annotations

import os
from types import SimpleNamespace

from speedgate.gpu_state import GpuState, read


class FakeNVML:
    NVML_CLOCK_SM = 0
    NVML_TEMPERATURE_GPU = 0
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksThrottleReasonSwThermalSlowdown = 0x20  # the older spelling, for a constant the new one lacks

    def __init__(self, mask: int, pids: list[int], clock: int = 1980) -> None:
        self.mask, self.pids, self.clock = mask, pids, clock

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self.clock

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 61

    def nvmlDeviceGetPowerUsage(self, handle):
        return 650_000

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.mask

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p) for p in self.pids]


def test_a_quiet_gpu_has_no_concerns() -> None:
    state = read(FakeNVML(0x1, [os.getpid()]), None)
    assert state.reasons == ["gpu-idle"] and state.concerns == []
    assert state.describe() == "SM 1980/1980 MHz, 61 C, 650/700 W, clock-event reasons: gpu-idle, other processes: 0"


def test_throttling_and_other_processes_are_concerns() -> None:
    state = read(FakeNVML(0x4 | 0x8 | 0x20, [os.getpid(), 4242], clock=1410), None)
    assert state.concerns == ["sw-power-cap", "hw-slowdown", "sw-thermal-slowdown", "1 other process(es) on the GPU"]
    assert state.to_json()["sm_clock_mhz"] == 1410


def test_a_failing_query_leaves_the_field_unknown() -> None:
    class Broken(FakeNVML):
        def nvmlDeviceGetPowerUsage(self, handle):
            raise RuntimeError("not supported")

    state = read(Broken(0, []), None)
    assert state.power_w is None and "power unknown" in state.describe()


def test_throttled_fractions() -> None:
    from speedgate.gpu_state import throttled_fractions, violation_ns

    class Counters(FakeNVML):
        NVML_PERF_POLICY_POWER = 0
        NVML_PERF_POLICY_THERMAL = 1

        def nvmlDeviceGetViolationStatus(self, handle, policy):
            return SimpleNamespace(violationTime=[5_000_000_000, 7][policy])

    before = {"power": 4_000_000_000, "thermal": 7}
    after = violation_ns(Counters(0, []), None)
    assert after == {"power": 5_000_000_000, "thermal": 7}
    assert throttled_fractions(before, after, 2.0) == {"power": 0.5, "thermal": 0.0}
    assert throttled_fractions(before, after, 0.0) == {}


def test_the_monitor_reads_energy_and_clock_or_none_where_the_card_has_no_counter() -> None:
    from speedgate.gpu_state import Monitor

    class Counting(FakeNVML):
        def nvmlDeviceGetTotalEnergyConsumption(self, handle):
            return 123_456

    monitor = object.__new__(Monitor)
    monitor._pynvml, monitor._handle = Counting(0, [], clock=1290), None
    assert monitor.energy_mj() == 123_456 and monitor.sm_clock_mhz() == 1290

    class NoCounter(FakeNVML):
        def nvmlDeviceGetTotalEnergyConsumption(self, handle):
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    monitor._pynvml = NoCounter(0, [])
    assert monitor.energy_mj() is None


class Cools:
    """GpuStates in turn (the last one repeats), and a clock that sleep() advances."""

    def __init__(self, *states: GpuState) -> None:
        self.states, self.now, self.reads = list(states), 0.0, 0

    def read(self) -> GpuState:
        self.reads += 1
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


HOT = GpuState(sm_clock_mhz=885, max_sm_clock_mhz=1980, temperature_c=86, reasons=["sw-thermal-slowdown"])
WARM = GpuState(sm_clock_mhz=345, max_sm_clock_mhz=1980, temperature_c=74, reasons=["gpu-idle", "sw-thermal-slowdown"])
COOL = GpuState(sm_clock_mhz=345, max_sm_clock_mhz=1980, temperature_c=70, reasons=["gpu-idle"])


def test_a_hot_gpu_is_waited_for_until_it_cools_and_a_cool_one_not_at_all() -> None:
    from speedgate.gpu_state import wait_until_cool

    cool = Cools(COOL)
    assert wait_until_cool(cool.read, 60, sleep=cool.sleep, clock=cool.clock) is None and cool.now == 0
    cooling = Cools(HOT, WARM, WARM, COOL)
    seen = wait_until_cool(cooling.read, 60, sleep=cooling.sleep, clock=cooling.clock)
    assert seen is not None and seen.cooled and seen.waited_s == 3.0
    assert seen.describe() == "waited 3 s for the GPU to cool (86 C -> 70 C)"
    stuck = Cools(HOT)
    seen = wait_until_cool(stuck.read, 10, poll_s=2, sleep=stuck.sleep, clock=stuck.clock)
    assert seen is not None and not seen.cooled and seen.waited_s == 10.0
    assert seen.describe() == "the GPU was still thermally throttled after 10 s (86 C -> 86 C): verdicts are suspect"


def test_a_re_measurement_waits_for_the_gpu_to_cool_only_after_heat_held_the_measurement_down() -> None:
    """The gate re-measures a regression once before it stands; when the heat held the first measurement's GPU
    down for more than the note's threshold, the GPU cools first and the note says how long that took."""
    from speedgate.gpu_state import cool_before

    calls: list[str] = []
    again = lambda: calls.append("measured") or 1.0  # noqa: E731
    notes: list[str] = []
    hot = Cools(HOT, COOL)
    wrapped = cool_before(again, hot.read, 0.13, 0.05, notes, sleep=hot.sleep, clock=hot.clock)
    assert wrapped() == 1.0 and calls == ["measured"] and hot.now == 1.0
    assert notes == ["waited 1 s for the GPU to cool (86 C -> 70 C)"]
    below = Cools(HOT)
    assert cool_before(again, below.read, 0.04, 0.05, notes) is again and below.reads == 0  # power, not heat
    assert cool_before(again, None, 0.5, 0.05, notes) is again  # no NVML: nothing to wait on
