"""The outputs checks of one comparison: what is compared ('returns', 'outputs', 'off'), the first calls, the timed
calls of rounds after the inputs were refreshed in place, and the calls after timing; memory poisoned before each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .closeness import Closeness, NonFiniteExpected, assert_close
from .sides import CaseError, InputSets, Side, poison, snapshot, storage_of, tensors, unwritten
from .timers import Fn

# How a verdict was established (CompareResult.established).
FRESH_INPUTS = "fresh inputs"  # inputs=: the sets refreshed in place during the rounds and the timed outputs checked
FIXED_INPUTS = "fixed inputs"  # zero-argument sides: the same inputs on every call, outputs checked before and after
UNCHECKED = "unchecked"  # check=False
CALLER = "caller"  # compare_samples: the outputs live in other processes, the caller checks them


class WrongAfterTiming(AssertionError):
    """A side matched the reference on its checked first call and not on a later checked call."""


class Unwritten(AssertionError):
    """A side returned memory it did not write on the checked call (it still held speedgate's poison)."""


def check_mode(check: bool, outputs: Any, case_id: str) -> str:
    """What compare() checks, as CompareResult.check: the two return values ('returns'), outputs= after each side
    ('outputs'), or nothing ('off': check=False, marked unchecked in the reports)."""
    if outputs is None:
        return "returns" if check else "off"
    if not callable(outputs):
        raise TypeError(f"speedgate: {case_id}: outputs= must be a zero-argument callable, got {type(outputs).__name__}")
    if not check:
        raise ValueError(f"speedgate: {case_id}: outputs= names what to check, check=False turns the check off; "
                         "pass one of them")
    return "outputs"


def returned_none(case_id: str, ref_out: Any, opt_out: Any) -> str | None:
    """Why the two return values cannot be compared, when a side returned None: a forgotten `return` once let a
    side that skipped its work pass unchecked, and bless a fake speedup."""
    if ref_out is None and opt_out is None:
        return (f"speedgate: {case_id}: both sides returned None, so there is nothing to compare. For in-place "
                "kernels pass outputs= (a zero-argument callable returning the tensors to compare, called after "
                "each side's first call), or say check=False to time the case unchecked.")
    for side, out, other, other_out in (("optimized", opt_out, "reference", ref_out),
                                        ("reference", ref_out, "optimized", opt_out)):
        if out is None:
            return (f"speedgate: {case_id}: the {side} callable returned None but the {other} returned "
                    f"{type(other_out).__name__}: a forgotten `return`? Return the result from both sides, or for an "
                    "in-place kernel return None from both and pass outputs=, or pass check=False.")
    return None


def refresh_checkpoint(batch: int) -> bool:
    """Whether the rounds stop after this batch (0-based) to check the last timed output and refresh the inputs:
    after batches 1, 2, 4, 8, ... (a cached result shows at the first; a few checks, whatever the case's length)."""
    n = batch + 1
    return n & (n - 1) == 0


class Checker:
    """The outputs check of one comparison: the first calls, the rounds' checkpoints and the calls after timing."""

    def __init__(self, case_id: str, mode: str, rtol: float | None, atol: float | None, ref_side: Side,
                 opt_side: Side, inputs: InputSets | None) -> None:
        self.case_id, self.mode, self.rtol, self.atol = case_id, mode, rtol, atol
        self.ref_side, self.opt_side, self.inputs = ref_side, opt_side, inputs
        self.closeness: list[Closeness] = []
        self.poisoned = 0  # tensors poisoned over all checks
        self.timed_checks = 0  # rounds' checkpoints at which the outputs were checked on refreshed inputs

    @property
    def established(self) -> str:
        """How the verdict's correctness was established (FRESH_INPUTS, FIXED_INPUTS or UNCHECKED)."""
        if self.mode == "off":
            return UNCHECKED
        if self.inputs is not None and self.inputs.distinct:
            return FRESH_INPUTS
        return FIXED_INPUTS

    # -- poisoning ---------------------------------------------------------------------------------------------
    def _spared(self) -> set[int]:
        """The storages never poisoned: every input set's, and the fresh set's of a check after timing (a side may
        return a view of its input; poisoning it would change what the sides read)."""
        if self.inputs is None:
            return set()
        pinned = self.ref_side.pinned or ()
        return self.inputs.storages() | {storage_of(t) for t in tensors(pinned)}

    def _outputs_buffers(self) -> list[Any]:
        """outputs=: the buffers outputs() returned after the last checked call of either side (never called here:
        outputs() runs only right after a side's checked call)."""
        return [*tensors(self.ref_side.buffers), *tensors(self.opt_side.buffers)]

    def poison_all(self) -> None:
        """Before a checked call: poison every tensor either side returned before (at a check, and on its last
        call) and every outputs= buffer; never an input."""
        targets: list[Any] = [*self._outputs_buffers()]
        for side in (self.ref_side, self.opt_side):
            targets += [*side.returned, *tensors(side.last)]
        self.poisoned += poison(targets, self._spared())

    def _checked_pair(self, call_ref: Callable[[], Any], call_opt: Callable[[], Any],
                      view: Callable[[Side, Any], Any]) -> tuple[Any, Any]:
        """(expected, actual) of one checked pair of calls: everything poisoned; the reference, a copy of what is
        compared of it; then what it returned and the outputs= buffers poisoned again, so that an optimized side that
        hands back the reference's memory shows it; the optimized side. view(side, returned) is what is compared."""
        self.poison_all()
        ref_raw = call_ref()
        expected = snapshot(view(self.ref_side, ref_raw))
        _keep(self.ref_side, ref_raw)
        self.poisoned += poison([*tensors(ref_raw), *self._outputs_buffers()], self._spared())
        opt_raw = call_opt()
        actual = view(self.opt_side, opt_raw)
        _keep(self.opt_side, opt_raw)
        return expected, actual

    def _compare(self, actual: Any, expected: Any, when: str) -> Closeness:
        problem = returned_none(self.case_id, expected, actual) if self.mode == "returns" else None
        if problem:
            raise CaseError(problem)
        found, total = unwritten(actual, expected)
        if found:
            raise Unwritten(
                f"speedgate: {self.case_id}: optimized output differs from reference {when}: the optimized side returned "
                f"memory it did not write on that call: {found} of {total} elements still hold the poison (NaN, or a "
                "sentinel for integers) that speedgate writes, just before each checked call, into every tensor either "
                "side returned before and every outputs= buffer. It returned a stale tensor (a cached result, the other "
                "side's tensor) or left part of its output unwritten (a launch grid that covers only part of it)")
        try:
            return assert_close(actual, expected, self.rtol, self.atol)
        except NonFiniteExpected as exc:  # no verdict on the optimized side can stand on it
            raise CaseError(f"speedgate: {self.case_id}: the reference's output {when} is not finite ({exc}): the "
                            "reference side is what is wrong here, not the optimized one; fix it (or the inputs "
                            "it is given) before the two are compared") from None

    # -- the checks --------------------------------------------------------------------------------------------
    def first(self, call_ref: Callable[[], Any], call_opt: Callable[[], Any]) -> None:
        """The first calls (each side's first call, however it is timed: the Side returns what is compared), the
        poison before each, then the check."""
        if self.mode == "off":
            call_ref(), call_opt()
            return
        expected, actual = self._checked_pair(call_ref, call_opt, lambda side, seen: seen)
        try:
            self.closeness.append(self._compare(actual, expected, "on its first call"))
        except (Unwritten, CaseError):
            raise
        except AssertionError as exc:
            what = "outputs= after the optimized side differ" if self.mode == "outputs" else "optimized output differs"
            raise AssertionError(f"speedgate: {self.case_id}: {what} from reference: {exc}") from None

    def start_rounds(self) -> None:
        """After warm-up, with inputs=: refill the sets in place, so that the timed rounds never run on contents a
        side saw before (a result cached during warm-up by input address is stale from here on)."""
        if self.inputs is not None and self.mode != "off":
            self.inputs.refresh()

    def at_checkpoint(self, batch: int) -> None:
        """Between batches of rounds (inputs= only, at refresh_checkpoint's batches): check_timed, then refill the
        sets in place again."""
        if self.inputs is None or self.mode == "off" or not refresh_checkpoint(batch):
            return
        self.check_timed(f"in batch {batch + 1} of the timed rounds")
        self.inputs.refresh()

    def end_rounds(self) -> None:
        """After the rounds, with inputs=: check_timed on the rounds' last call."""
        if self.inputs is not None and self.mode != "off":
            self.check_timed("on the last timed call")

    def check_timed(self, when: str) -> None:
        """The optimized side's last timed output against the reference computed now on the same contents
        (outputs=: a call of each on them, untimed, since the buffers were overwritten by whichever side ran last)."""
        inputs = self.inputs
        index = self.opt_side.last_set
        if inputs is None or index is None:
            return
        args = inputs.sets[index]
        if self.mode == "returns":
            actual = self.opt_side.last
            expected = snapshot(self.ref_side.call_on(args))
        else:
            expected, actual = self._checked_pair(lambda: self.ref_side.call_on(args),
                                                  lambda: self.opt_side.call_on(args), lambda side, _: side.watched(None))
        try:
            self._compare(actual, expected, when)
        except AssertionError as exc:
            raise WrongAfterTiming(
                f"speedgate: {self.case_id}: the optimized side's output {when} differs from reference (computed on the "
                f"same inputs, after speedgate refilled the input sets in place {inputs.refreshes} time(s): the same "
                f"tensors, new contents): {exc}. Look for a result cached by input address or shape (a memo keyed on "
                "data_ptr), a buffer reused across calls, or a launch grid that covers only part of the output") from None
        self.timed_checks += 1

    def again(self, reference: Fn | None = None, optimized: Fn | None = None) -> None:
        """Call both sides once more after the rounds (what was timed, graph replays too: reference and optimized,
        else the sides themselves), on an input set neither has seen when inputs= is given, poisoned first, and
        check the outputs again."""
        if self.mode == "off":
            return
        ref_side, opt_side, inputs = self.ref_side, self.opt_side, self.inputs
        where = "the last timed state"
        if inputs is not None:
            fresh = inputs.make(inputs.fresh_seed)
            ref_side.pinned = opt_side.pinned = fresh
            where = f"a fresh input set (seed {inputs.fresh_seed}) neither side saw before"
        try:
            expected, actual = self._checked_pair(reference or ref_side, optimized or opt_side,
                                                  lambda side, returned: side.watched(returned))
        finally:
            ref_side.pinned = opt_side.pinned = None
        try:
            self._compare(actual, expected, f"after timing (called again on {where})")
        except (Unwritten, CaseError):
            raise
        except AssertionError as exc:
            raise WrongAfterTiming(
                f"speedgate: {self.case_id}: the optimized side was right on the first call and wrong after timing "
                f"(called again on {where}): its output differs from reference: {exc}. Look for a stale cached buffer, "
                "a result computed once, a CUDA graph output overwritten by a later replay, or a launch grid that covers "
                "only part of the output") from None


def _keep(side: Side, returned: Any) -> None:
    """Add what a checked call returned to the tensors poisoned before every later check of the comparison."""
    known = {id(t) for t in side.returned}
    side.returned += [t for t in tensors(returned) if id(t) not in known]
