"""The `perf` fixture's object: assert_close, and compare() which measures, judges and records one case."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import codegen, judging
from .advice import bless_command
from .checks import FIXED_INPUTS
from .closeness import Closeness, assert_close
from .measure import Measurement, Policy, measurement_from_samples
from .pipeline import CALLER, FIXED_INPUTS_WAIVER, CaseSpec, Comparison, case_spec, compiled_frames, judge_case
from .results import CompareResult, MetricResult
from .sides import CaseError
from .timers import as_timer
from .verdict import fails

__all__ = ["CaseError", "Perf", "SpeedRegression", "compiled_frames"]

if TYPE_CHECKING:
    from .session import SpeedgateSession


class SpeedRegression(AssertionError):
    """Raised after a test body when one of its comparisons regressed (or, in strict mode, was not gated)."""


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


class Perf:
    """What a test gets from the `perf` fixture."""

    def __init__(self, session: SpeedgateSession, nodeid: str, timer: Any = None) -> None:
        self._session = session
        self._timer = None if timer is None else as_timer(timer)
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
        reference: Callable[..., Any],
        optimized: Callable[..., Any],
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
        outputs: Callable[[], Any] | None = None,
        inputs: Callable[[int], Sequence[Any]] | None = None,
        latency: bool = False,
        waive: Mapping[str, str] | None = None,
    ) -> CompareResult:
        """Check that optimized matches reference, time both side by side, and gate the speedup.

        The sides are zero-argument callables, or with inputs=make (make(seed) returns a tuple of arguments) both
        are called as fn(*args) on input sets rotated through warm-up and rounds, checked first on a set neither saw
        before, again after timing on a fresh one, and checked for writing to their inputs.
        check=True compares the two callables' first return values with assert_close, and again after the timed
        rounds (a side right only on the checked call fails); a side returning None is an error. In-place kernels
        return None and pass outputs=, a zero-argument callable returning the tensors to compare: called right
        after each side's checked call (timed with its first call), the reference's copied before the optimized side
        runs. check=False times the case unchecked, and the reports say so. flops= and bytes= are the optimized
        side's work, for achieved TFLOP/s and GB/s; on the GPU they also give "% of peak" against the ceilings
        measured in this run (flops_dtype= names the matmul ceiling: bf16, fp16, fp8, tf32, fp32), and a time
        under that roofline floor fails as implausible. On the GPU each side's device work is also checked to lie
        inside its timed interval (not on a stream the timed one never waits for). config= records the
        configuration the optimized side ran with (an autotuner's choice); a change from the blessed one is
        reported. graph=True (GPU) captures both sides into CUDA graphs after warm-up and times their replays: for
        kernels of tens of microseconds, where host launch overhead would otherwise leak into the samples; it
        measures the device's work only, so never use it for a case about launch overhead (nor with inputs=: a
        graph replays the inputs it captured). On the GPU the rounds time the device's work: a spin kernel holds
        the device while the host queues each batch of calls, so a slow launch does not leak into the times.
        latency=True (GPU) times each call from an idle device instead, its host work included: for cases about
        launch overhead (a graph break, Python between kernels); a side that synchronizes inside is timed that way
        anyway, and the report's timer says so. waive={check: reason} waives a check whose condition can be the
        optimization itself ('no-device-work'; 'fixed-inputs' under --speedgate-strict), with the reason in words;
        the reports show it. A regression does not raise here: the test fails after its body, so every comparison in
        it is measured and reported. The stages: speedgate.pipeline.
        """
        from .checks import check_mode

        case_id = self._case_id(name)
        if graph and inputs is not None:
            raise ValueError(f"speedgate: {case_id}: graph=True replays the inputs it captured; it cannot rotate inputs=")
        if graph and latency:
            raise ValueError(f"speedgate: {case_id}: graph=True times the device's work only, latency=True the host's "
                             "work too: choose one")
        spec = case_spec(case_id, self.nodeid, self._session.bench.hardware_key, name=name, tolerance=tolerance, flops=flops,
                         bytes=bytes, flops_dtype=flops_dtype, config=config, check=check_mode(check, outputs, case_id),
                         rtol=rtol, atol=atol, graph=graph, latency=latency, waive=waive)
        comparison = Comparison(spec, reference, optimized, services=self._session, timer=self._timer,
                                outputs=outputs, inputs=inputs)
        result, samples = comparison.run(self._untimed_reason())
        if samples is not None:
            self.samples[result.case_id] = samples
        self._record(result)
        return result

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
        "optimized_first_ms", "seconds", "stopped_by", "timer", optionally "throttled": {"power": fraction,
        "thermal": fraction} and "codegen": {"reference": [kernel facts], "optimized": [...]}} (what
        measure_across_ranks returns; the first measurement's codegen is the case's, compared with its entry's as
        compare()'s is); it is called
        once, and once more to re-measure before a regression fails. The statistics, verdict, baselines and
        reports are compare()'s. world_size > 1 files the result under the hardware key '<N>x-<key>' (its own
        baseline file, for example baselines/2x-nvidia-h200.json). Correctness is the caller's to check (the
        outputs live in the other processes). In correctness-only mode or under the Triton interpreter, measure
        is not called and the case is recorded untimed; check `perf.timing` to skip the timing work there.
        """
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"speedgate: world_size must be a positive int, got {world_size!r}")
        bench = self._session.bench
        key = bench.hardware_key if world_size == 1 else bench.multi_gpu_key(world_size)
        case_id = self._case_id(name)
        spec = case_spec(case_id, self.nodeid, key, name=name, tolerance=tolerance, flops=flops, bytes=bytes,
                         flops_dtype=flops_dtype, config=config, check=CALLER)  # the outputs live in other processes
        untimed = self._untimed_reason()
        if untimed:
            result = judging.untimed(spec.fields(_default(self._session, spec)), untimed, established=CALLER)
            self._record(result)
            return result

        said: dict[str, Any] = {}  # the first measurement's throttling and kernels, as compare() reports its own

        def take() -> Measurement:
            raw = measure()
            try:
                if not said:
                    said["throttled"] = {str(k): float(v) for k, v in dict(raw.get("throttled") or {}).items()}
                    said["codegen"] = codegen.from_samples(raw.get("codegen"))
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
            if not (m.reference_ms > 0 and m.optimized_ms > 0):
                raise CaseError(f"speedgate: {case_id}: a median time is zero (reference {m.reference_ms} ms, "
                                f"optimized {m.optimized_ms} ms): the work is below the clock's resolution")
            return m

        first = take()
        extra = {"established": CALLER, **({"codegen": said["codegen"]} if said["codegen"] else {})}
        result, samples = judge_case(self._session, spec, first, take, extra, graphed=False,
                                     throttled=said["throttled"], closeness=[])
        self.samples[result.case_id] = samples
        self._record(result)
        return result

    def blessed_config(self, name: str | None = None) -> dict[str, Any] | None:
        """The configuration this test's comparison `name` was blessed with (compare(..., config=): an autotuner's
        choice), so that the case can hold its kernel to it instead of racing the autotuner again: which candidate
        wins a race of near-equal ones differs between cards and processes, and a gate measures the blessed kernel.
        A calibrating bless gets it too (its processes add evidence to the entry, and another config's would be
        another kernel's); a plain --update-baselines gets None (a re-bless chooses afresh), as does a case with no
        entry or an entry that recorded no config."""
        settings = self._session.settings
        if settings.update_baselines and settings.calibrate_runs is None:
            return None
        config = (self._entry(name) or {}).get("config")
        return dict(config) if isinstance(config, Mapping) else None

    def _entry(self, name: str | None) -> Mapping[str, Any] | None:
        """The baseline entry of this test's comparison `name` on this run's hardware key, or None."""
        entry: Mapping[str, Any] | None = self._session.book.entry(self._case_id_of(name), self._session.bench.hardware_key)
        return entry

    @property
    def blessing(self) -> bool:
        """Whether this run writes the baseline (--update-baselines, plain or calibrating). A case whose tolerance
        depends on its entry (one pinned loosely while the entry holds no blessed_config yet) pins nothing while
        blessing, so that a calibrating bless measures the case's spread instead of recording the pin."""
        return bool(self._session.settings.update_baselines)

    @property
    def policy(self) -> Policy:
        """The run's measurement policy (--speedgate-budget, --speedgate-noise): pass policy.to_json() to the ranks
        of a multi-process case, for speedgate.distributed.measure_across_ranks(..., policy=...)."""
        return Policy.from_settings(self._session.settings)

    @property
    def timing(self) -> bool:
        """Whether comparisons in this run are timed (not in correctness-only mode, not under the interpreter)."""
        return not self._untimed_reason()

    def _case_id(self, name: str | None) -> str:
        """This test's id for a comparison named name; ValueError when the test already compared one of that name."""
        case_id = self._case_id_of(name)
        if any(r.case_id == case_id for r in self.results):
            raise ValueError(f"speedgate: {case_id} was already compared in this test; give each compare a distinct name=")
        return case_id

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
        metric_id = self._case_id_of(name)
        if not name or any(c in name for c in "\n\r\t"):
            raise ValueError(f"speedgate: metric name {name!r} must be non-empty and on one line")
        if any(m.metric_id == metric_id for m in self.metrics):
            raise ValueError(f"speedgate: metric {metric_id} was already recorded in this test")
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ValueError(f"speedgate: metric {metric_id} must be a finite number, got {value!r}")
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise ValueError(f"speedgate: metric tolerance must be finite and non-negative, got {tolerance!r}")
        book, key = self._session.book, self._session.bench.hardware_key
        result = judging.judge_metric_value(
            metric_id, self.nodeid, name, key, float(value), tolerance=float(tolerance), direction=direction,
            unit=unit, entry=book.metric(metric_id, key), file_found=book.found(key),
        )
        self.metrics.append(result)
        self._session.record_metric(result)
        self._queue_failure(result)
        return result

    def _case_id_of(self, name: str | None) -> str:
        return self._session.case_ids.case_id(self.nodeid, name)

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
        self._fail_codegen(result)
        settings = self._session.settings
        if settings.strict and not settings.update_baselines and result.established == FIXED_INPUTS \
                and FIXED_INPUTS_WAIVER not in (result.waived or {}):
            self.failures.append(
                f"{result.case_id}: strict mode: its correctness was established on fixed inputs (zero-argument sides: "
                "the same inputs on every call), which cannot show a result cached across calls. Pass inputs=make "
                "(make(seed) returns the arguments), or state why it cannot: waive={'fixed-inputs': 'why'}")

    def _fail_codegen(self, result: CompareResult) -> None:
        """--speedgate-strict: new software changed the kernels of a comparison (speedgate.codegen)."""
        settings = self._session.settings
        if settings.strict and not settings.update_baselines and result.codegen_drift and result.codegen_changes:
            self.failures.append(
                f"{result.case_id}: strict mode: the kernels changed with the software since the bless: "
                f"{'; '.join(result.codegen_changes)}. If the change is intended, re-bless ({bless_command()})")

    def _queue_failure(self, result: CompareResult | MetricResult) -> None:
        settings = self._session.settings
        if not settings.update_baselines and fails(result.verdict, settings.strict):
            self.failures.append(judging.failure_text(
                result, baseline_path=self._session.book.path_for(result.hardware_key),
                artifacts_dir=settings.artifacts_dir))


def _default(session: SpeedgateSession, spec: CaseSpec) -> Any:
    from .tolerance import resolve

    return resolve(spec.hardware_key, pinned=spec.pinned_tolerance, entry=None, configured=session.settings.tolerance)


def _optional_ms(value: Any) -> float | None:
    """A first-call time from measure(): None when it was not measured (never NaN: a baseline refuses NaN)."""
    return None if value is None else float(value)
