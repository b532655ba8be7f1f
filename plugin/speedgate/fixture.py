"""The `perf` fixture's object: assert_close, and compare() which measures, judges and records one case."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import gate
from .ceilings import MATMUL_DTYPES
from .closeness import Closeness, assert_close
from .gpu_state import throttled_fractions
from .measure import Measurement, Policy, measure_pair, measurement_from_samples
from .results import CompareResult, MetricResult

if TYPE_CHECKING:
    from .session import SpeedgateSession
    from .timers import Timer


class CaseError(Exception):
    """A compared callable raised; the message says which side and what it raised."""


class RecompiledInRounds(AssertionError):
    """torch.compile compiled again while a comparison was being timed: the samples hold compile time."""


class SpeedRegression(AssertionError):
    """Raised after a test body when one of its comparisons regressed (or, in strict mode, was not gated)."""


def compiled_frames() -> int:
    """Frames torch.compile (dynamo) has compiled in this process, a recompilation counting again; 0 when dynamo
    was never imported. Never imports torch."""
    utils = sys.modules.get("torch._dynamo.utils")
    return 0 if utils is None else int(utils.counters["frames"]["total"])


def _recompile_check(case_id: str) -> Callable[[], None]:
    """Armed after warm-up: fails the case if torch.compile compiled anything during the timed rounds."""
    if sys.modules.get("torch._dynamo.utils") is None:
        return lambda: None
    before = compiled_frames()

    def check() -> None:
        compiled = compiled_frames() - before
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

    def __init__(self, session: SpeedgateSession, nodeid: str, timer: Timer | None = None) -> None:
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
        case_id = common["case_id"]
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
            result = gate.untimed(common, untimed, closeness)
            self._record(result)
            return result

        timer = self._timer or self._session.timer()
        policy = self.policy
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
            result = gate.untimed(common, untimed)
            self._record(result)
            return result

        def take() -> Measurement:
            raw = measure()
            try:
                m = measurement_from_samples(
                    list(raw["reference_ms"]), list(raw["optimized_ms"]),
                    reference_first_ms=_optional_ms(raw.get("reference_first_ms")),
                    optimized_first_ms=_optional_ms(raw.get("optimized_first_ms")),
                    seconds=float(raw.get("seconds", 0.0)), stopped_by=str(raw.get("stopped_by", "external")),
                    stats_seconds=float(raw.get("stats_seconds", 0.0)),
                    timer=str(raw.get("timer", "external")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise CaseError(f"speedgate: {case_id}: measure() returned unusable samples: {exc}") from exc
            _check_measurable(case_id, m)
            return m

        return self._judge_and_record(take(), take, common, graphed=False, throttled={}, roofline=lambda m: {},
                                      closeness=[])

    @property
    def policy(self) -> Policy:
        """The run's measurement policy (--speedgate-budget, --speedgate-noise): pass policy.to_json() to the ranks
        of a multi-process case, for speedgate.distributed.measure_across_ranks(..., policy=...)."""
        return Policy.from_settings(self._session.settings)

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
        tol = self._session.settings.default_tolerance(hardware_key) if tolerance is None else float(tolerance)
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
        fields: dict[str, Any],
        *,
        graphed: bool,
        throttled: Mapping[str, float],
        roofline: Callable[[Measurement], dict[str, Any]],
        closeness: list[Closeness],
    ) -> CompareResult:
        """Judge against the baseline of the case's hardware key, keep the samples for artifacts, record the result
        and queue the failure (raised after the test body)."""
        settings = self._session.settings
        key = fields["hardware_key"]
        result, first, final = gate.judge_measurement(
            measurement, again, fields, entry=self._session.baseline_entry(fields["case_id"], key),
            file_found=self._session.baseline_found_for(key), remeasure=not settings.update_baselines,
            graphed=graphed, throttled=throttled, roofline=roofline, closeness=closeness,
        )
        self.samples[result.case_id] = gate.samples_record(first, final)
        self._record(result)
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
        key = self._session.hardware_key
        result = gate.judge_metric_value(
            metric_id, self.nodeid, name, key, float(value), tolerance=float(tolerance), direction=direction,
            unit=unit, entry=self._session.baseline_metric(metric_id), file_found=self._session.baseline_found,
        )
        self.metrics.append(result)
        self._session.record_metric(result)
        self._queue_failure(result)
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
        self._queue_failure(result)

    def _queue_failure(self, result: CompareResult | MetricResult) -> None:
        settings = self._session.settings
        if not settings.update_baselines and gate.fails(result.verdict, settings.strict):
            self.failures.append(gate.failure_text(
                result, baseline_path=self._session.baseline_path_for(result.hardware_key),
                artifacts_dir=settings.artifacts_dir))


def _graph_capture(timer: Timer, case_id: str) -> Callable[[Callable[[], Any]], Callable[[], Any]] | None:
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


def _optional_ms(value: Any) -> float | None:
    """A first-call time from measure(): None when it was not measured (never NaN: a baseline refuses NaN)."""
    return None if value is None else float(value)


def _plain_config(case_id: str, config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The config as plain JSON values (it travels to xdist's controller and into the baseline file)."""
    if config is None:
        return None
    try:
        return json.loads(json.dumps(dict(config), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"speedgate: {case_id}: config= must hold plain JSON values: {exc}") from None
