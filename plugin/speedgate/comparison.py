"""How compare() runs the two sides: guarded calls, input sets rotated through warm-up and rounds, outputs checked
on the first call and again after timing, inputs checked for mutation, and the work inside the timed stream."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import gate
from .closeness import Closeness, assert_close
from .integrity import outside_stream

Fn = Callable[[], Any]

# Input sets made by inputs= and rotated through warm-up and rounds: no result can be reused from the call before,
# and with the L2 flushed before each call no input stays cached. One more set, never seen before, re-checks the
# sides after timing.
INPUT_SETS = 3


class CaseError(Exception):
    """A compared case cannot run or be checked as written (a side raised, outputs= failed, nothing to compare);
    the message says which side and why."""


class RecompiledInRounds(AssertionError):
    """torch.compile compiled again while a comparison was being timed: the samples hold compile time."""


class WrongAfterTiming(AssertionError):
    """A side matched the reference on its checked first call and not after the timed rounds."""


class Dishonest(AssertionError):
    """A measured time that cannot be true: under the roofline floor, or work outside the timed stream."""


def compiled_frames() -> int:
    """Frames torch.compile (dynamo) has compiled in this process, a recompilation counting again; 0 when dynamo
    was never imported. Never imports torch."""
    utils = sys.modules.get("torch._dynamo.utils")
    return 0 if utils is None else int(utils.counters["frames"]["total"])


def recompile_check(case_id: str) -> Callable[[], None]:
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


class InputSets:
    """inputs=: make(seed) returns one set of arguments; both sides are called as fn(*args)."""

    def __init__(self, make: Callable[[int], Sequence[Any]], case_id: str, count: int = INPUT_SETS) -> None:
        if not callable(make):
            raise TypeError(f"speedgate: {case_id}: inputs= must be a callable make(seed) returning a tuple of arguments")
        self._make, self.case_id = make, case_id
        self.sets = [self.make(seed) for seed in range(count)]
        self.first_copy = gate.snapshot(self.sets[0])  # the checked set, to catch a side that writes its inputs
        self.fresh_seed = count

    def make(self, seed: int) -> tuple[Any, ...]:
        try:
            args = self._make(seed)
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: inputs=({seed}) raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(args, (tuple, list)):
            raise CaseError(f"speedgate: {self.case_id}: inputs= must return a tuple of arguments, got {type(args).__name__}")
        return tuple(args)

    def assert_unchanged(self, side: str) -> None:
        """Fail when the side's first call changed the checked set's arguments (an in-place write to an input)."""
        for i, (now, before) in enumerate(zip(self.sets[0], self.first_copy)):
            if not same_bits(now, before):
                raise CaseError(f"speedgate: {self.case_id}: the {side} side changed its inputs (argument {i}) on its "
                                "first call. A timed side must leave its inputs as it found them; each call would "
                                "otherwise see different data")


def same_bits(a: Any, b: Any) -> bool:
    """Whether a and b hold the same bits: tensors compared byte for byte (any dtype, fp8 and NaN included),
    containers element by element, anything else with ==."""
    if hasattr(a, "detach") and hasattr(b, "detach"):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach().contiguous(), b.detach().contiguous()
        return bool(a.view(-1).view(dtype=_byte(a)).equal(b.view(-1).view(dtype=_byte(b))))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # an object without a meaningful ==: nothing to compare
        return True


def _byte(t: Any) -> Any:
    import torch

    return torch.uint8 if t.numel() else t.dtype


class Side:
    """One side as a zero-argument callable for the timers: errors named, inputs rotated, the first call checked."""

    def __init__(self, fn: Callable[..., Any], name: str, case_id: str, inputs: InputSets | None,
                 outputs: Fn | None, copy: bool) -> None:
        if not callable(fn):
            kind = "callable taking the arguments inputs= makes" if inputs else "zero-argument callable"
            raise TypeError(f"speedgate: {case_id}: the {name} must be a {kind}, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)  # a scripted clock finds the side by its __name__
        self.fn, self.name, self.case_id = fn, name, case_id
        self.inputs, self.outputs, self.copy = inputs, outputs, copy
        self.calls = 0
        self.pinned: tuple[Any, ...] | None = None

    def __call__(self) -> Any:
        first = self.calls == 0
        args: tuple[Any, ...] = ()
        if self.inputs is not None:
            args = self.pinned if self.pinned is not None else self.inputs.sets[self.calls % len(self.inputs.sets)]
        self.calls += 1
        try:
            out = self.fn(*args)
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: the {self.name} callable raised {type(exc).__name__}: {exc}") from exc
        if first and self.inputs is not None:
            self.inputs.assert_unchanged(self.name)
        return self.watched(out) if first else out

    def watched(self, out: Any) -> Any:
        """What a checked call returns: outputs() taken right after it in outputs= mode (a copy for the reference,
        whose buffer the other side's call may overwrite), else its own return value."""
        if self.outputs is None:
            return out
        try:
            out = self.outputs()
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: outputs= raised {type(exc).__name__}: {exc} (after the {self.name})") from exc
        if out is None:
            raise CaseError(f"speedgate: {self.case_id}: outputs= returned None after the {self.name}: return what the sides write")
        return gate.snapshot(out) if self.copy else out


class Checker:
    """The outputs check of one comparison: on the first calls, and again after timing."""

    def __init__(self, case_id: str, mode: str, rtol: float | None, atol: float | None, ref_side: Side,
                 opt_side: Side, inputs: InputSets | None) -> None:
        self.case_id, self.mode, self.rtol, self.atol = case_id, mode, rtol, atol
        self.ref_side, self.opt_side, self.inputs = ref_side, opt_side, inputs
        self.closeness: list[Closeness] = []

    def first(self, ref_out: Any, opt_out: Any) -> None:
        if self.mode == "off":
            return
        problem = gate.returned_none(self.case_id, ref_out, opt_out) if self.mode == "returns" else None
        if problem:
            raise CaseError(problem)
        try:
            self.closeness.append(assert_close(opt_out, ref_out, self.rtol, self.atol))
        except AssertionError as exc:
            what = "outputs= after the optimized side differ" if self.mode == "outputs" else "optimized output differs"
            raise AssertionError(f"speedgate: {self.case_id}: {what} from reference: {exc}") from None

    def again(self, reference: Fn | None = None, optimized: Fn | None = None) -> None:
        """Call both sides once more after the rounds (what was timed, graph replays too: reference and optimized,
        else the sides themselves), on an input set neither has seen when inputs= is given, and check the outputs
        again."""
        if self.mode == "off":
            return
        ref_side, opt_side, inputs = self.ref_side, self.opt_side, self.inputs
        reference, optimized = reference or ref_side, optimized or opt_side
        where = "the last timed state"
        if inputs is not None:
            fresh = inputs.make(inputs.fresh_seed)
            ref_side.pinned = opt_side.pinned = fresh
            where = f"a fresh input set (seed {inputs.fresh_seed}) neither side saw before"
        try:
            ref_out = ref_side.watched(reference())
            ref_out = gate.snapshot(ref_out)
            opt_out = opt_side.watched(optimized())
        finally:
            ref_side.pinned = opt_side.pinned = None
        problem = gate.returned_none(self.case_id, ref_out, opt_out) if self.mode == "returns" else None
        try:
            if problem:
                raise AssertionError(problem)
            assert_close(opt_out, ref_out, self.rtol, self.atol)
        except AssertionError as exc:
            raise WrongAfterTiming(
                f"speedgate: {self.case_id}: the optimized side was right on the first call and wrong after timing "
                f"(called again on {where}): its output differs from reference: {exc}. Look for a stale cached buffer, "
                "a result computed once, a CUDA graph output overwritten by a later replay, or a launch grid that covers "
                "only part of the output") from None


def check_streams(case_id: str, timer: Any, reference: Fn, optimized: Fn) -> dict[str, float]:
    """On the GPU, once per comparison: a few calls of each side timed behind a hold (as the rounds time a comparison
    without latency=True; a latency comparison's host work is not what the profiler checks), under the profiler.
    Records the events' median of those calls beside the device's busy time per call (the timing-accuracy figure),
    and fails a side whose work on all streams does not fit in its timed interval. {} where there is no profiler."""
    profile = getattr(timer, "profile_calls", None)
    if profile is None:
        return {}
    found: dict[str, float] = {}
    for side, fn in (("reference", reference), ("optimized", optimized)):
        traced = profile(fn)
        reason = outside_stream(case_id, side, traced["events_ms"], traced["all_streams_ms"])
        if reason:
            raise Dishonest(reason)
        found[f"{side}_profiled_ms"] = float(traced["events_ms"])
        found[f"{side}_busy_ms"] = float(traced["busy_ms"])
    return found


def graph_capture(timer: Any, case_id: str) -> Callable[[Fn], Fn] | None:
    graphed = getattr(timer, "graphed", None)
    if graphed is None:
        return None  # no CUDA timer (CPU work, or a scripted clock): graph=True has nothing to capture

    def prepare(fn: Fn) -> Fn:
        try:
            replay: Fn = graphed(fn)
        except Exception as exc:
            raise CaseError(
                f"speedgate: {case_id}: graph=True, but a side could not be captured in a CUDA graph "
                f"({type(exc).__name__}: {exc}); time it without graph=True"
            ) from exc
        return replay

    return prepare
