"""One path through perf.compare(): the case's arguments checked once (CaseSpec), then named stages that each take
what the last one produced: check (the first calls, outputs compared), measure (warm-up and interleaved rounds),
audit (outputs again after timing, the Evidence and every integrity audit), judge (the tolerance, the verdict, a
re-measure before a regression stands) and record (the caller's)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from . import codegen, integrity, judging, picks
from . import tolerance as tolerances
from .baseline import now_iso
from .blessing import between_run_spread
from .ceilings import MATMUL_DTYPES
from .checks import CALLER, Checker
from .devices import host_state
from .measure import Measurement, Policy, Timed, time_pair
from .recompiles import RecompiledInRounds, compiled_frames, no_recompile
from .results import CompareResult
from .sides import CaseError, InputSets, Side
from .timers import Fn, Timer
from .timers.cycles import CYCLES_TIMER

if TYPE_CHECKING:
    from .bench import Bench
    from .book import BaselineBook

# What a case may waive, with a stated reason (perf.compare(..., waive={name: reason})): an audit whose condition can
# be the optimization itself, and strict mode's demand for fresh inputs.
FIXED_INPUTS_WAIVER = "fixed-inputs"
WAIVERS = (*integrity.WAIVABLE, FIXED_INPUTS_WAIVER)


class Dishonest(AssertionError):
    """A measured time that cannot be true: under the roofline floor, work outside the timed stream, or no device
    work at all."""


class Services(Protocol):
    """What the stages need from the run (speedgate.session.SpeedgateSession holds it): its settings, the bench they
    time on (timer, GPU monitor, roofline, the fingerprint's card and software), the baseline book they judge
    against, and the project's own audit (pytest_speedgate_audit)."""

    @property
    def settings(self) -> Any: ...

    @property
    def bench(self) -> Bench: ...

    @property
    def book(self) -> BaselineBook: ...

    def audit(self, evidence: integrity.Evidence) -> str | None: ...


@dataclass(frozen=True)
class CaseSpec:
    """One comparison's arguments, checked: what every stage reads and every result of it carries."""

    case_id: str
    nodeid: str
    name: str | None
    hardware_key: str
    pinned_tolerance: float | None
    flops: float | None = None
    bytes: float | None = None
    flops_dtype: str | None = None
    config: dict[str, Any] | None = None
    check: str = "returns"
    rtol: float | None = None
    atol: float | None = None
    graph: bool = False
    latency: bool = False
    waived: Mapping[str, str] | None = None

    def fields(self, tolerance: tolerances.Tolerance) -> dict[str, Any]:
        """The fields every CompareResult of this comparison shares."""
        return dict(case_id=self.case_id, nodeid=self.nodeid, name=self.name, hardware_key=self.hardware_key,
                    tolerance=tolerance.value, tolerance_source=tolerance.source,
                    tolerance_pinned=self.pinned_tolerance is not None, flops=self.flops, bytes=self.bytes,
                    flops_dtype=self.flops_dtype, config=self.config, check=self.check,
                    waived=dict(self.waived) if self.waived else None)


def case_spec(case_id: str, nodeid: str, hardware_key: str, *, name: str | None, tolerance: float | None,
              flops: float | None, bytes: float | None, flops_dtype: str | None,  # noqa: A002
              config: Mapping[str, Any] | None, **rest: Any) -> CaseSpec:
    """A CaseSpec from compare()'s (or compare_samples()') arguments; ValueError naming the one that is wrong."""
    if name is not None and (not name or any(c in name for c in "\n\r\t")):
        raise ValueError(f"speedgate: case name {name!r} must be non-empty and on one line")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance)
                                      and 0.0 <= tolerance < 1.0):
        raise ValueError(f"speedgate: tolerance must be a fraction in [0, 1), got {tolerance!r}")
    for label, value in (("flops", flops), ("bytes", bytes)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"speedgate: {label}= must be a finite non-negative number, got {value!r}")
    if flops_dtype is not None and flops_dtype not in MATMUL_DTYPES:
        raise ValueError(f"speedgate: flops_dtype={flops_dtype!r} is not one of {', '.join(MATMUL_DTYPES)}")
    waived = rest.pop("waive", None)
    if waived is not None:
        waived = _waivers(case_id, waived)
    return CaseSpec(case_id, nodeid, name, hardware_key, None if tolerance is None else float(tolerance), flops, bytes,
                    flops_dtype, _plain_config(case_id, config), waived=waived, **rest)


def _waivers(case_id: str, waive: Any) -> dict[str, str]:
    if not isinstance(waive, Mapping):
        raise TypeError(f"speedgate: {case_id}: waive= must be a dict of {{check: reason}}, got {type(waive).__name__}")
    for key, reason in waive.items():
        if key not in WAIVERS:
            raise ValueError(f"speedgate: {case_id}: waive={{{key!r}: ...}}: not a check a case can waive; choose from "
                             f"{', '.join(WAIVERS)}")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"speedgate: {case_id}: waive={{{key!r}: ...}} needs the reason, in words")
    return {str(k): str(v).strip() for k, v in waive.items()}


def _plain_config(case_id: str, config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The config as plain JSON values (it travels to xdist's controller and into the baseline file)."""
    if config is None:
        return None
    try:
        return json.loads(json.dumps(dict(config), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"speedgate: {case_id}: config= must hold plain JSON values: {exc}") from None


def graph_capture(timer: Timer, case_id: str) -> Callable[[Fn], Fn] | None:
    """graph=True: each side captured into a CUDA graph after warm-up (the rounds time replays); None where the
    timer captures nothing (CPU work, a scripted clock)."""
    if not timer.can_graph:
        return None

    def prepare(fn: Fn) -> Fn:
        try:
            return timer.graphed(fn)
        except Exception as exc:
            raise CaseError(f"speedgate: {case_id}: graph=True, but a side could not be captured in a CUDA graph "
                            f"({type(exc).__name__}: {exc}); time it without graph=True") from exc

    return prepare


class Comparison:
    """One perf.compare() call, run stage by stage (run() in order, or the stages one at a time)."""

    def __init__(self, spec: CaseSpec, reference: Callable[..., Any], optimized: Callable[..., Any], *,
                 services: Services, timer: Timer | None, outputs: Fn | None = None,
                 inputs: Callable[[int], Sequence[Any]] | None = None) -> None:
        self.spec, self.services = spec, services
        self._timer = timer
        sets = InputSets(inputs, spec.case_id) if inputs is not None else None
        # The reference's first call runs first: only its outputs= must be copied.
        self.ref = Side(reference, "reference", spec.case_id, sets, outputs, copy=True)
        self.opt = Side(optimized, "optimized", spec.case_id, sets, outputs, copy=False)
        self.checker = Checker(spec.case_id, spec.check, spec.rtol, spec.atol, self.ref, self.opt, sets)
        self.first_ms: tuple[float | None, float | None] = (None, None)
        # Each side's Triton and Gluon kernels as launched after any autotuning (speedgate.codegen): from the graph
        # capture with graph=True, else from the audit's profiled calls.
        self.compiled: dict[str, list[dict[str, Any]]] = {}
        # The kernels each side's first calls ran, where the timer can profile (codegen.with_first_calls).
        self.first_launched: dict[str, list[Any]] = {}

    @property
    def timer(self) -> Timer:
        if self._timer is None:
            self._timer = self.services.bench.timer()
        return self._timer

    def run(self, untimed: str = "") -> tuple[CompareResult, dict[str, Any] | None]:
        """Every stage but recording: (the result, its raw samples); untimed (a reason): only the checks, and no
        samples."""
        try:
            if untimed:
                self.checker.first(self.ref, self.opt)
                self.checker.again()
                return judging.untimed(self.spec.fields(self.tolerance(None)), untimed, self.checker.closeness,
                                       established=self.checker.established), None
            clock = time.monotonic
            t0 = clock()
            self.check()
            t1 = clock()
            violations = self._violations()
            timed = self.measure()
            cooling: list[str] = []
            calibrating = self.calibrate(self._throttled(violations, t1), cooling)
            t2 = clock()
            evidence = self.audit(timed)
            t3 = clock()
            result, samples = self.judge(timed, evidence, throttled=self._throttled(violations, t1),
                                         calibrating=calibrating, cooling=cooling)
            first_s = sum(ms for ms in self.first_ms if ms) / 1e3
            stages = {"first_calls_s": first_s, "checks_s": max(t1 - t0 - first_s, 0.0), "warm_up_rounds_s": t2 - t1,
                      "audit_s": t3 - t2, "judge_s": clock() - t3}
            budget = {**(result.budget or {}), **{k: round(v, 4) for k, v in stages.items()}}
            return replace(result, budget=budget), samples
        finally:
            self.ref.forget()
            self.opt.forget()

    # -- the stages ----------------------------------------------------------------------------------------------
    def check(self) -> None:
        """The first call of each side, timed alone (compilation, autotuning), poisoned before and checked."""
        first: dict[str, float] = {}

        def call(side: Side) -> Callable[[], Any]:
            def once() -> Any:
                noting: contextlib.AbstractContextManager[list[Any]] = (
                    codegen.compiled_launches() if self.timer.can_profile else contextlib.nullcontext([]))
                with noting as launched:
                    first[side.name], out = self.timer.first_call(side)
                self.first_launched.setdefault(side.name, []).extend(launched)
                return out
            return once

        self.checker.first(call(self.ref), call(self.opt))
        self.first_ms = (first.get("reference"), first.get("optimized"))

    def measure(self) -> Timed:
        """Warm-up and interleaved rounds (graph replays with graph=True); with inputs=, the sets refilled in place
        after warm-up and at the rounds' checkpoints, the timed outputs checked there and after the last round."""
        policy = Policy.from_settings(self.services.settings)
        prepare = codegen.noting(graph_capture(self.timer, self.spec.case_id), self.compiled) if self.spec.graph else None
        checker = self.checker

        @contextlib.contextmanager
        def rounds() -> Iterator[None]:
            checker.start_rounds()
            with no_recompile(self.spec.case_id):
                yield
            checker.end_rounds()

        return self._time_pair(policy, prepare, guard=rounds, between=checker.at_checkpoint)

    def audit(self, timed: Timed) -> integrity.Evidence:
        """What was timed (graph replays too) checked again on fresh inputs; the evidence gathered (the profiled
        calls, the roofline floor) and every audit run on it, before anything is judged or recorded."""
        self.checker.again(timed.reference, timed.optimized)
        spec = self.spec
        profiled = None
        if self.timer.can_profile:
            profiled = {}
            for side, fn in (("reference", timed.reference), ("optimized", timed.optimized)):
                profiled[side], facts = codegen.call_noting(functools.partial(self.timer.profile_calls, fn))
                self.compiled.setdefault(side, codegen.with_first_calls(facts, self.first_launched.get(side, [])))
        roofline = self.services.bench.roofline(self.timer, spec.flops, spec.bytes, spec.flops_dtype)
        floor_ms, bound, ceiling = roofline if roofline is not None else (None, None, "")
        evidence = integrity.Evidence(spec.case_id, timed.measurement.real_optimized_ms, profiled, floor_ms, bound,
                                      ceiling, spec.flops, spec.bytes)
        reason = integrity.first_failure(evidence, spec.waived or {}) or self.services.audit(evidence)
        if reason:
            raise Dishonest(reason)
        return evidence

    @property
    def compute_floor_ms(self) -> float | None:
        """The roofline floor of the case's declared work when the matmul rate sets it (flops= with flops_dtype=,
        that term the larger), else None: such a pair may be counted in SM cycles (measure.counts_cycles). A gate
        run times a case the way its entry was blessed: an entry blessed in milliseconds stays in milliseconds until
        a bless moves it to cycles, so a file blessed before cycles were counted gates as it did."""
        spec = self.spec
        if not (spec.flops and spec.flops_dtype) or spec.latency:
            return None
        entry = self.services.book.entry(spec.case_id, spec.hardware_key)
        if entry is not None and entry.get("timer") != CYCLES_TIMER and not self.services.settings.update_baselines:
            return None
        roofline = self.services.bench.roofline(self.timer, spec.flops, spec.bytes, spec.flops_dtype)
        return roofline[0] if roofline is not None and roofline[1] == "compute" else None

    def tolerance(self, entry: Mapping[str, Any] | None) -> tolerances.Tolerance:
        spec = self.spec
        return tolerances.resolve(spec.hardware_key, pinned=spec.pinned_tolerance, entry=entry,
                                  configured=self.services.settings.tolerance)

    def again(self, throttled: Mapping[str, float], cooling: list[str]) -> Callable[[], Measurement]:
        """A measurement of its own, as the rounds were taken: each side called once, synchronised, before warm-up
        (the first calls' times stay those of the real first calls). If heat held the GPU down, it cools first
        (gpu_state.COOL_WAIT_S at most), saying so in cooling."""
        from .gpu_state import cool_before

        spec = self.spec
        policy = Policy.from_settings(self.services.settings)
        prepare = graph_capture(self.timer, spec.case_id) if spec.graph else None

        def again() -> Measurement:
            self.timer.first_call(self.ref)
            self.timer.first_call(self.opt)
            return self._time_pair(policy, prepare).measurement

        monitor = self.services.bench.monitor
        return cool_before(again, monitor.read if monitor is not None else None, throttled.get("thermal", 0.0),
                           judging.THROTTLE_NOTE_FRACTION, cooling)

    def calibrate(self, throttled: Mapping[str, float], cooling: list[str]) -> list[Measurement] | None:
        """--speedgate-calibrate: the runs after the judged one, taken right after it and before the audit profiles
        the sides. A launch-bound pass can run at another speed once its process has profiled, so runs on both
        sides of the audit would put that into the in-process spread (docs/results/gate-study-h200.md and
        gate-study.md, section 5)."""
        runs = self.services.settings.calibrate_runs
        if not runs:
            return None
        again = self.again(throttled, cooling)
        return [again() for _ in range(runs - 1)]

    def judge(self, timed: Timed, evidence: integrity.Evidence, *, throttled: Mapping[str, float],
              calibrating: Sequence[Measurement] | None = None,
              cooling: list[str] | None = None) -> tuple[CompareResult, dict[str, Any]]:
        """The verdict against the baseline entry, with the tolerance speedgate.tolerance resolves."""
        spec = self.spec
        cooling = [] if cooling is None else cooling
        again = self.again(throttled, cooling)
        extra: dict[str, Any] = {"established": self.checker.established, **_profiled_fields(evidence),
                                 "codegen": codegen.sides_of(evidence.profiled, self.compiled)}
        result, samples = judge_case(self.services, spec, timed.measurement, again, extra, graphed=spec.graph,
                                     throttled=throttled, closeness=self.checker.closeness, floor_ms=evidence.floor_ms,
                                     bound=evidence.bound, calibrating=calibrating)
        if cooling:
            result = replace(result, note=f"{result.note}; before re-measuring, {'; '.join(cooling)}")
        return result, samples

    def _violations(self) -> dict[str, int]:
        monitor = self.services.bench.monitor
        return monitor.violations() if monitor else {}

    def _time_pair(self, policy: Policy, prepare: Callable[[Fn], Fn] | None, **rounds: Any) -> Timed:
        """The pair timed once as this comparison times it (measure.time_pair; rounds: its guard and checkpoints),
        checked measurable, with the share of the measurement's own wall time the power cap held the clocks
        (Measurement.power_capped): the first measurement and every one taken again."""
        before, started = self._violations(), time.monotonic()
        timed = time_pair(self.ref, self.opt, self.timer, policy, first_ms=self.first_ms, latency=self.spec.latency,
                          prepare=prepare, compute_floor_ms=self.compute_floor_ms, **rounds)
        _check_measurable(self.spec.case_id, timed.measurement)
        capped = self._throttled(before, started).get("power")
        return timed if capped is None else replace(timed, measurement=replace(timed.measurement, power_capped=capped))

    def _throttled(self, before: dict[str, int], started: float) -> dict[str, float]:
        from .gpu_state import throttled_fractions

        monitor = self.services.bench.monitor
        return throttled_fractions(before, monitor.violations(), time.monotonic() - started) if monitor else {}


def judge_case(services: Services, spec: CaseSpec, measurement: Measurement, again: Callable[[], Measurement],
               extra: Mapping[str, Any], *, graphed: bool, throttled: Mapping[str, float], closeness: list[Any],
               floor_ms: float | None = None, bound: str | None = None,
               calibrating: Sequence[Measurement] | None = None) -> tuple[CompareResult, dict[str, Any]]:
    """The judge stage, shared by compare() and compare_samples(): the tolerance resolved, calibration runs when
    blessing with --speedgate-calibrate (calibrating: those runs, taken already; else taken here), then the verdict
    (re-measured once before a regression stands). Returns the result and its raw samples (for the artifacts of a
    failing test)."""
    settings = services.settings
    # A run whose kernels are one of the entry's other picks is judged against that pick's numbers (speedgate.picks).
    entry, judged_pick = picks.judged_entry(services.book.entry(spec.case_id, spec.hardware_key), extra.get("codegen"))
    tol = tolerances.resolve(spec.hardware_key, pinned=spec.pinned_tolerance, entry=entry, configured=settings.tolerance)
    fields = {**spec.fields(tol), **extra, "card": services.bench.card(), "judged_pick": judged_pick,
              "judged_at": now_iso(), **host_state()}
    if settings.calibrate_runs:
        calibrated, settled = calibration(measurement, again, settings.calibrate_runs, taken=calibrating)
        fields.update(calibrated)
        if not settled:  # a run of the calibration drifted to its end: the whole is no steady speed (not blessed)
            measurement = replace(measurement, settled=False)

    def roofline(m: Measurement) -> dict[str, Any]:
        return {"peak_fraction": floor_ms / m.real_optimized_ms, "bound": bound} if floor_ms and m.optimized_ms else {}

    result, first, final = judging.judge_measurement(
        measurement, again, fields, entry=entry, file_found=services.book.found(spec.hardware_key),
        remeasure=not settings.update_baselines, graphed=graphed, throttled=throttled, roofline=roofline,
        closeness=closeness, software=services.bench.software(),
    )
    return result, judging.samples_record(first, final)


def calibration(first: Measurement, again: Callable[[], Measurement], runs: int,
                taken: Sequence[Measurement] | None = None) -> tuple[dict[str, Any], bool]:
    """--speedgate-calibrate: measure runs - 1 more times in this process (or take those runs, measured already); the
    spread of the runs' speedups (the first is the one judged and blessed), and whether every run settled (a run
    still drifting at its end would put the device's drift into the spread). Fresh rounds see drift within a process;
    what differs between processes and cards only calibrating blesses in several processes and on several cards see
    (blessing.py keeps that evidence)."""
    measured = [first, *(taken if taken is not None else [again() for _ in range(runs - 1)])]
    spread = between_run_spread([m.speedup for m in measured])
    return {"calibration_runs": runs, "calibration_spread": spread}, all(m.settled for m in measured)


def _profiled_fields(evidence: integrity.Evidence) -> dict[str, Any]:
    profiled = evidence.profiled or {}
    found: dict[str, Any] = {"traces_lost": sum(int(traced.get("lost", 0)) for traced in profiled.values())}
    for side, traced in profiled.items():
        found[f"{side}_profiled_ms"] = float(traced["events_ms"])
        found[f"{side}_busy_ms"] = float(traced["busy_ms"])
    return found


def _check_measurable(case_id: str, m: Measurement) -> None:
    if not (m.reference_ms > 0 and m.optimized_ms > 0):
        raise CaseError(
            f"speedgate: {case_id}: a median time is zero (reference {m.reference_ms} ms, optimized {m.optimized_ms} ms): "
            "the work is below the clock's resolution; make the case larger"
        )


__all__ = ["CALLER", "CaseSpec", "Comparison", "Dishonest", "RecompiledInRounds", "Services", "WAIVERS", "case_spec",
           "compiled_frames", "judge_case"]
