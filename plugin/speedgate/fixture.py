"""The `perf` fixture's object: assert_close, and compare() which measures, judges and records one case."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .ceilings import MATMUL_DTYPES
from .closeness import Closeness, assert_close
from .measure import Measurement, Policy, measure_pair, measurement_from_samples
from .gpu_state import throttled_fractions
from .stats import sample_stats
from .verdict import Judgement, Verdict, judge, judge_metric

if TYPE_CHECKING:
    from .session import SpeedgateSession
    from .timers import Timer


# A case is reported as measured on an unstable GPU when thermal policy held its clocks down for more than this
# fraction of its comparison (NVML violation counters, read before and after).
THROTTLE_NOTE_FRACTION = 0.05


class CaseError(Exception):
    """A compared callable raised; the message says which side and what it raised."""


class RecompiledInRounds(AssertionError):
    """torch.compile compiled again while a comparison was being timed: the samples hold compile time."""


class SpeedRegression(AssertionError):
    """Raised after a test body when one of its comparisons regressed (or, in strict mode, was not gated)."""


@dataclass(frozen=True)
class CompareResult:
    """One comparison as measured and judged. Times in milliseconds; speedup = reference_ms / optimized_ms."""

    case_id: str
    nodeid: str
    name: str | None
    hardware_key: str
    timed: bool
    verdict: str
    note: str
    tolerance: float
    speedup: float | None = None
    reference_ms: float | None = None
    optimized_ms: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    noise: float | None = None
    reference_cv: float | None = None
    optimized_cv: float | None = None
    rounds: int | None = None
    timer: str | None = None
    stopped_by: str | None = None
    reference_first_ms: float | None = None
    optimized_first_ms: float | None = None
    baseline: float | None = None
    change: float | None = None
    remeasured: bool = False
    flops: float | None = None
    bytes: float | None = None
    max_abs_error: float | None = None
    rel_error: float | None = None
    flops_dtype: str | None = None
    reference_stats: dict[str, Any] | None = None
    optimized_stats: dict[str, Any] | None = None
    peak_fraction: float | None = None
    bound: str | None = None
    config: dict[str, Any] | None = None
    throttled: dict[str, float] | None = None
    graphed: bool = False

    @property
    def achieved_tflops(self) -> float | None:
        """The optimized side's arithmetic rate, when flops= was given."""
        if self.flops is None or not self.optimized_ms:
            return None
        return self.flops / (self.optimized_ms * 1e-3) / 1e12

    @property
    def achieved_gbps(self) -> float | None:
        """The optimized side's memory rate, when bytes= was given."""
        if self.bytes is None or not self.optimized_ms:
            return None
        return self.bytes / (self.optimized_ms * 1e-3) / 1e9

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record["achieved_tflops"] = self.achieved_tflops
        record["achieved_gbps"] = self.achieved_gbps
        return record


@dataclass(frozen=True)
class MetricResult:
    """One single-valued metric as judged against its baseline."""

    metric_id: str
    nodeid: str
    name: str
    hardware_key: str
    value: float
    tolerance: float
    direction: str
    unit: str
    verdict: str
    note: str
    baseline: float | None = None
    change: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _recompile_check(case_id: str) -> Callable[[], None]:
    """Armed after warm-up: fails the case if torch.compile compiled anything during the timed rounds."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return lambda: None
    before = utils.counters["frames"]["total"]

    def check() -> None:
        compiled = utils.counters["frames"]["total"] - before
        if compiled:
            raise RecompiledInRounds(
                f"speedgate: {case_id}: torch.compile compiled {compiled} frame(s) during the timed rounds (a "
                "recompilation: a guard failed, e.g. a new shape, dtype or Python value); the samples include "
                "compile time. Make the inputs static across calls, or mark dimensions dynamic."
            )

    return check


def _guard(fn: Callable[[], Any], side: str, case_id: str) -> Callable[[], Any]:
    if not callable(fn):
        raise TypeError(f"speedgate: {case_id}: the {side} must be a zero-argument callable, got {type(fn).__name__}")

    @functools.wraps(fn)
    def call() -> Any:
        try:
            return fn()
        except Exception as exc:
            raise CaseError(f"speedgate: {case_id}: the {side} callable raised {type(exc).__name__}: {exc}") from exc

    return call


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


class Perf:
    """What a test gets from the `perf` fixture."""

    def __init__(self, session: "SpeedgateSession", nodeid: str, timer: "Timer | None" = None) -> None:
        self._session = session
        self._timer = timer
        self.nodeid = nodeid
        self.results: list[CompareResult] = []
        self.failures: list[str] = []
        self.metrics: list[MetricResult] = []
        # Raw samples per case, kept for the artifacts of a failing test (never sent anywhere else).
        self.samples: dict[str, dict[str, Any]] = {}

    def assert_close(
        self, actual: Any, expected: Any, rtol: float | None = None, atol: float | None = None, *, rel_l2: float | None = None
    ) -> Closeness:
        """Fail unless actual matches expected (see speedgate.closeness.assert_close); returns the errors seen."""
        return assert_close(actual, expected, rtol, atol, rel_l2=rel_l2)

    def compare(
        self,
        reference: Callable[[], Any],
        optimized: Callable[[], Any],
        *,
        name: str | None = None,
        tolerance: float | None = None,
        flops: float | None = None,
        bytes: float | None = None,  # noqa: A002 - the contract's name; the optimized side's minimum traffic
        check: bool = True,
        rtol: float | None = None,
        atol: float | None = None,
        flops_dtype: str | None = None,
        config: Mapping[str, Any] | None = None,
        graph: bool = False,
    ) -> CompareResult:
        """Check that optimized() matches reference(), time both side by side, and gate the speedup.

        check=True compares the two callables' first return values with assert_close (skipped when
        either returns None, as in-place kernels do). flops= and bytes= are the optimized side's work,
        for achieved TFLOP/s and GB/s; on the GPU they also give "% of peak" against the ceilings measured
        in this run (flops_dtype= names the matmul ceiling: bf16, fp16, fp8, tf32, fp32). config= records
        the configuration the optimized side ran with (an autotuner's choice); a change from the blessed
        one is reported. graph=True (GPU) captures both sides into CUDA graphs after warm-up and times their
        replays: for kernels of tens of microseconds, where host launch overhead would otherwise leak into the
        samples; it measures the device's work only, so never use it for a case about launch overhead. A regression does not raise here: the test fails after its body,
        so every comparison in it is measured and reported.
        """
        common = self._case(name, tolerance, flops, bytes, flops_dtype, config, self._session.hardware_key)
        case_id, settings = common["case_id"], self._session.settings
        ref = _guard(reference, "reference", case_id)
        opt = _guard(optimized, "optimized", case_id)
        closeness: list[Closeness] = []

        def check_outputs(ref_out: Any, opt_out: Any) -> None:
            if not check or ref_out is None or opt_out is None:
                return
            try:
                closeness.append(assert_close(opt_out, ref_out, rtol, atol))
            except AssertionError as exc:
                raise AssertionError(f"speedgate: {case_id}: optimized output differs from reference: {exc}") from None

        untimed = self._untimed_reason()
        if untimed:
            check_outputs(ref(), opt())
            result = CompareResult(timed=False, verdict=Verdict.UNTIMED.value, note=f"timing skipped: {untimed}", **common, **_errors(closeness))
            self._record(result)
            return result

        timer = self._timer or self._session.timer()
        policy = Policy(budget_s=settings.budget_s, target_rel_halfwidth=settings.target_noise)
        monitor = self._session.monitor
        started = time.monotonic()
        violations_before = monitor.violations() if monitor else {}
        arm = functools.partial(_recompile_check, case_id)
        prepare = _graph_capture(timer, case_id) if graph else None
        measurement = measure_pair(
            ref, opt, timer, policy, on_first_outputs=check_outputs, before_rounds=arm, prepare_rounds=prepare
        )
        _check_measurable(case_id, measurement)
        throttled = (
            throttled_fractions(violations_before, monitor.violations(), time.monotonic() - started) if monitor else {}
        )

        def again() -> Measurement:
            m = measure_pair(ref, opt, timer, policy)
            _check_measurable(case_id, m)
            return m

        return self._judge_and_record(
            measurement, again, common, graphed=prepare is not None, throttled=throttled,
            roofline=lambda m: self._session.roofline(timer, m.optimized_ms, flops, bytes, flops_dtype),
            closeness=closeness,
        )

    def compare_samples(
        self,
        measure: Callable[[], Mapping[str, Any]],
        *,
        name: str | None = None,
        world_size: int = 1,
        tolerance: float | None = None,
        flops: float | None = None,
        bytes: float | None = None,  # noqa: A002
        flops_dtype: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> CompareResult:
        """Gate samples timed elsewhere: in child processes, on several ranks (see speedgate.distributed).

        measure() returns paired rounds, {"reference_ms": [...], "optimized_ms": [...], "reference_first_ms",
        "optimized_first_ms", "seconds", "stopped_by", "timer"} (what measure_across_ranks returns); it is called
        once, and once more to re-measure before a regression fails. The statistics, verdict, baselines and
        reports are compare()'s. world_size > 1 files the result under the hardware key '<N>x-<key>' (its own
        baseline file, for example baselines/2x-nvidia-h200.json). Correctness is the caller's to check (the
        outputs live in the other processes). In correctness-only mode or under the Triton interpreter, measure
        is not called and the case is recorded untimed; check `perf.timing` to skip the timing work there.
        """
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"speedgate: world_size must be a positive int, got {world_size!r}")
        key = self._session.hardware_key if world_size == 1 else self._session.multi_gpu_key(world_size)
        common = self._case(name, tolerance, flops, bytes, flops_dtype, config, key)
        case_id = common["case_id"]
        untimed = self._untimed_reason()
        if untimed:
            result = CompareResult(timed=False, verdict=Verdict.UNTIMED.value, note=f"timing skipped: {untimed}", **common)
            self._record(result)
            return result

        def take() -> Measurement:
            raw = measure()
            try:
                m = measurement_from_samples(
                    list(raw["reference_ms"]), list(raw["optimized_ms"]),
                    reference_first_ms=float(raw.get("reference_first_ms", float("nan"))),
                    optimized_first_ms=float(raw.get("optimized_first_ms", float("nan"))),
                    seconds=float(raw.get("seconds", 0.0)), stopped_by=str(raw.get("stopped_by", "external")),
                    timer=str(raw.get("timer", "external")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise CaseError(f"speedgate: {case_id}: measure() returned unusable samples: {exc}") from exc
            _check_measurable(case_id, m)
            return m

        return self._judge_and_record(take(), take, common, graphed=False, throttled={}, roofline=lambda m: {},
                                      closeness=[])

    @property
    def timing(self) -> bool:
        """Whether comparisons in this run are timed (not in correctness-only mode, not under the interpreter)."""
        return not self._untimed_reason()

    def _case(
        self, name: str | None, tolerance: float | None, flops: float | None, bytes: float | None,  # noqa: A002
        flops_dtype: str | None, config: Mapping[str, Any] | None, hardware_key: str,
    ) -> dict[str, Any]:
        """The fields every CompareResult of this comparison shares, after checking its arguments."""
        case_id = self.nodeid if name is None else f"{self.nodeid}::{name}"
        if name is not None and (not name or any(c in name for c in "\n\r\t")):
            raise ValueError(f"speedgate: case name {name!r} must be non-empty and on one line")
        if any(r.case_id == case_id for r in self.results):
            raise ValueError(f"speedgate: {case_id} was already compared in this test; give each compare a distinct name=")
        tol = self._session.settings.tolerance if tolerance is None else float(tolerance)
        if not (math.isfinite(tol) and 0.0 <= tol < 1.0):
            raise ValueError(f"speedgate: tolerance must be a fraction in [0, 1), got {tolerance!r}")
        for label, value in (("flops", flops), ("bytes", bytes)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"speedgate: {label}= must be a finite non-negative number, got {value!r}")
        if flops_dtype is not None and flops_dtype not in MATMUL_DTYPES:
            raise ValueError(f"speedgate: flops_dtype={flops_dtype!r} is not one of {', '.join(MATMUL_DTYPES)}")
        return dict(case_id=case_id, nodeid=self.nodeid, name=name, hardware_key=hardware_key, tolerance=tol,
                    flops=flops, bytes=bytes, flops_dtype=flops_dtype, config=_plain_config(case_id, config))

    def _judge_and_record(
        self,
        measurement: Measurement,
        again: Callable[[], Measurement],
        common: dict[str, Any],
        *,
        graphed: bool,
        throttled: Mapping[str, float],
        roofline: Callable[[Measurement], dict[str, Any]],
        closeness: list[Closeness],
    ) -> CompareResult:
        """Judge a measurement against the baseline of its hardware key (re-measuring once before a regression
        fails), keep its samples for artifacts, record the result and queue the failure."""
        settings = self._session.settings
        case_id, key, tol, config_json = common["case_id"], common["hardware_key"], common["tolerance"], common["config"]
        entry = self._session.baseline_entry(case_id, key)
        baseline = entry["speedup"] if entry else None
        found = self._session.baseline_found_for(key)
        judgement = judge(measurement.estimate, baseline, tol, file_found=found)
        remeasured = False
        first = measurement
        if judgement.verdict is Verdict.REGRESSED and not settings.update_baselines:
            # Re-measure once before failing: a transient (another process, a clock dip) must not fail CI.
            remeasured = True
            measurement = again()
            judgement = judge(measurement.estimate, baseline, tol, file_found=found)
        self.samples[case_id] = {
            "reference_ms": measurement.reference_samples, "optimized_ms": measurement.optimized_samples,
            "order": "round i timed reference then optimized when i is even, the other way round when odd",
            "first_measurement": None if first is measurement else {
                "reference_ms": first.reference_samples, "optimized_ms": first.optimized_samples},
        }
        note = judgement.note
        if remeasured:
            note = f"{note} (first measurement {first.speedup:.3f}x regressed; re-measured)".strip()
        if entry and entry.get("config") is not None and config_json is not None and entry["config"] != config_json:
            note = f"{note}; configuration changed since the baseline: {entry['config']} -> {config_json}".lstrip("; ")
        # Power capping is the steady state of tensor-core work on these cards (recorded, not flagged); thermal
        # slowdown is not, and makes the measurement unstable.
        if throttled.get("thermal", 0.0) > THROTTLE_NOTE_FRACTION:
            note = (f"{note}; GPU thermally throttled for {min(throttled['thermal'], 1.0):.0%} of the comparison: "
                    "an unstable measurement").lstrip("; ")
        result = CompareResult(
            timed=True,
            verdict=judgement.verdict.value,
            note=note,
            **common,
            **_measured(measurement, judgement),
            remeasured=remeasured,
            graphed=graphed,
            throttled={name: round(frac, 3) for name, frac in throttled.items()} or None,
            **roofline(measurement),
            **_errors(closeness),
        )
        self._record(result)
        if not settings.update_baselines and judgement.fails(settings.strict):
            self.failures.append(self._failure_message(result, judgement))
        return result

    def metric(
        self,
        name: str,
        value: float,
        *,
        tolerance: float,
        direction: str = "lower",
        unit: str = "",
    ) -> MetricResult:
        """Gate a single-valued metric of this test against its baseline (compile seconds, recompiles, ...).

        direction='lower' (the default) means lower is better. There is one value, no interval: the tolerance
        alone separates noise from change, so give timings a wide one and exact counts 0. A regression fails the
        test after its body, like a speedup regression; --update-baselines blesses the value.
        """
        metric_id = f"{self.nodeid}::{name}"
        if not name or any(c in name for c in "\n\r\t"):
            raise ValueError(f"speedgate: metric name {name!r} must be non-empty and on one line")
        if any(m.metric_id == metric_id for m in self.metrics):
            raise ValueError(f"speedgate: metric {metric_id} was already recorded in this test")
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ValueError(f"speedgate: metric {metric_id} must be a finite number, got {value!r}")
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise ValueError(f"speedgate: metric tolerance must be finite and non-negative, got {tolerance!r}")
        entry = self._session.baseline_metric(metric_id)
        baseline = entry["value"] if entry else None
        judgement = judge_metric(float(value), baseline, float(tolerance), direction, file_found=self._session.baseline_found)
        note = f"{name} {judgement.note}" if judgement.note else ""
        result = MetricResult(
            metric_id=metric_id, nodeid=self.nodeid, name=name, hardware_key=self._session.hardware_key,
            value=float(value), tolerance=float(tolerance), direction=direction, unit=unit,
            verdict=judgement.verdict.value, note=note, baseline=baseline, change=judgement.change,
        )
        self.metrics.append(result)
        self._session.record_metric(result)
        settings = self._session.settings
        if not settings.update_baselines and judgement.fails(settings.strict):
            steps = (f"Next: re-run to confirm; if intended, re-bless with `pytest --update-baselines {self.nodeid}`"
                     if judgement.verdict is Verdict.REGRESSED else f"strict mode: {judgement.verdict.value} metric; "
                     f"bless it with `pytest --update-baselines {self.nodeid}`")
            self.failures.append(f"{metric_id}: {note or judgement.verdict.value}\n  {steps}")
        return result

    def _untimed_reason(self) -> str:
        if self._session.settings.correctness_only:
            return "correctness-only mode"
        if interpreter_active():
            return "Triton interpreter (TRITON_INTERPRET=1): interpreted kernels are not timed"
        return ""

    def _record(self, result: CompareResult) -> None:
        self.results.append(result)
        self._session.record(result)

    def _failure_message(self, result: CompareResult, judgement: Judgement) -> str:
        key = result.hardware_key
        path = self._session.baseline_path_for(key)
        if judgement.verdict is Verdict.REGRESSED:
            artifacts = self._session.settings.artifacts_dir
            look = f"inspect the artifacts kept under {artifacts}; " if artifacts else "keep artifacts with --speedgate-artifacts DIR; "
            steps = (
                f"Next: re-run this test to confirm; {look}if the slowdown is intended, re-bless with "
                f"`pytest --update-baselines {self.nodeid}`"
            )
        elif judgement.verdict is Verdict.NO_BASELINE_FILE:
            steps = f"strict mode: there is no baseline file {path} for hardware key {key}; create it with `pytest --update-baselines`"
        elif judgement.verdict is Verdict.NEW:
            steps = f"strict mode: {path} has no entry for this case; bless it with `pytest --update-baselines {self.nodeid}`"
        else:
            steps = f"strict mode: bless the improvement with `pytest --update-baselines {self.nodeid}`"
        return f"{result.case_id}: {result.note or judgement.verdict.value}\n  {steps}"


def _graph_capture(timer: "Timer", case_id: str) -> Callable[[Callable[[], Any]], Callable[[], Any]] | None:
    graphed = getattr(timer, "graphed", None)
    if graphed is None:
        return None  # no CUDA timer (CPU work, or a scripted clock): graph=True has nothing to capture

    def prepare(fn: Callable[[], Any]) -> Callable[[], Any]:
        try:
            return graphed(fn)
        except Exception as exc:
            raise CaseError(
                f"speedgate: {case_id}: graph=True, but a side could not be captured in a CUDA graph "
                f"({type(exc).__name__}: {exc}); time it without graph=True"
            ) from exc

    return prepare


def _check_measurable(case_id: str, m: Measurement) -> None:
    if not (m.reference_ms > 0 and m.optimized_ms > 0):
        raise CaseError(
            f"speedgate: {case_id}: a median time is zero (reference {m.reference_ms} ms, optimized {m.optimized_ms} ms): "
            "the work is below the clock's resolution; make the case larger"
        )


def _measured(m: Measurement, j: Judgement) -> dict[str, Any]:
    return dict(
        speedup=m.speedup,
        reference_ms=m.reference_ms,
        optimized_ms=m.optimized_ms,
        ci_low=m.estimate.low,
        ci_high=m.estimate.high,
        noise=m.estimate.rel_halfwidth,
        reference_cv=m.reference_cv,
        optimized_cv=m.optimized_cv,
        rounds=m.rounds,
        timer=m.timer,
        stopped_by=m.stopped_by,
        reference_first_ms=m.reference_first_ms,
        optimized_first_ms=m.optimized_first_ms,
        reference_stats=sample_stats(m.reference_samples),
        optimized_stats=sample_stats(m.optimized_samples),
        baseline=j.baseline,
        change=j.change,
    )


def _plain_config(case_id: str, config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The config as plain JSON values (it travels to xdist's controller and into the baseline file)."""
    if config is None:
        return None
    try:
        return json.loads(json.dumps(dict(config), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"speedgate: {case_id}: config= must hold plain JSON values: {exc}") from None


def _errors(closeness: list[Closeness]) -> dict[str, Any]:
    if not closeness:
        return {}
    return dict(max_abs_error=closeness[0].max_abs_error, rel_error=closeness[0].rel_error)
