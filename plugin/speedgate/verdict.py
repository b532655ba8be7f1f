"""The gate: what a measured speedup means against its baseline entry, and whether the test fails."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from .stats import RatioEstimate


class Verdict(str, Enum):
    PASS = "pass"
    REGRESSED = "regressed"
    IMPROVED = "improved"
    NEW = "new"
    # Measured again, up to the gate's limit, and still neither clear of the floor nor clearly below it.
    INCONCLUSIVE = "inconclusive"
    # The speedup left its band, and the side that moved launched other kernels than blessed (an autotuner's or a
    # compiler's other pick): its speed is another kernel's, not a change of the blessed one.
    PICK_CHANGED = "pick-changed"
    NO_BASELINE_FILE = "no-baseline-file"
    UNTIMED = "untimed"
    BLESSED = "blessed"
    MISSING = "missing"  # `compare`: in OLD, not in NEW


# Order of severity for reports: regressions first.
SEVERITY = {
    Verdict.REGRESSED: 0,
    Verdict.INCONCLUSIVE: 0,
    Verdict.PICK_CHANGED: 1,
    Verdict.IMPROVED: 1,
    Verdict.NEW: 2,
    Verdict.NO_BASELINE_FILE: 3,
    Verdict.MISSING: 3,
    Verdict.PASS: 4,
    Verdict.BLESSED: 5,
    Verdict.UNTIMED: 6,
}

T = TypeVar("T")


def _own_verdict(item: Any) -> Verdict:
    verdict: Verdict = item.verdict
    return verdict


def by_severity(items: Iterable[T], verdict_of: Callable[[T], Verdict] | None = None) -> list[T]:
    """Regressions first, then improvements, new cases, passes; in their given order within each. The one place
    results are ordered for a report; verdict_of defaults to each item's .verdict."""
    of: Callable[[T], Verdict] = verdict_of or _own_verdict
    ranked = sorted(enumerate(items), key=lambda pair: (SEVERITY.get(of(pair[1]), 9), pair[0]))
    return [item for _, item in ranked]


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    baseline: float | None
    floor: float | None
    change: float | None  # measured / baseline - 1
    note: str

    def fails(self, strict: bool) -> bool:
        return fails(self.verdict, strict)


def fails(verdict: Verdict, strict: bool) -> bool:
    """Whether a verdict fails its test: a regression and an inconclusive comparison always (a gate that could not
    decide must not read as a pass); with strict, also a new case, an improvement beyond tolerance, another pick and
    a missing baseline file."""
    if verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE):
        return True
    return strict and verdict in (Verdict.IMPROVED, Verdict.NEW, Verdict.NO_BASELINE_FILE, Verdict.PICK_CHANGED)


def percent(fraction: float) -> str:
    """10% for a whole percent, 2.3% otherwise (a calibrated tolerance is rarely whole)."""
    return f"{fraction:.0%}" if abs(fraction * 100 - round(fraction * 100)) < 1e-9 else f"{fraction:.1%}"


def fmt_ci(est: RatioEstimate) -> str:
    return f"{est.ratio:.3f}x ({est.confidence:.0%} CI {est.low:.3f}-{est.high:.3f}, {est.rounds} rounds)"


def straddles(judgement: Judgement, estimate: RatioEstimate) -> bool:
    """A pass whose point estimate lies below the floor while its interval reaches over it: not yet decided."""
    return (judgement.verdict == Verdict.PASS and judgement.floor is not None and estimate.ratio < judgement.floor
            <= estimate.high)


def judge(estimate: RatioEstimate, baseline: float | None, tolerance: float, *, file_found: bool) -> Judgement:
    """Fail only on a clear regression: the whole interval below baseline * (1 - tolerance).

    An interval wholly above baseline * (1 + tolerance) is an improvement to re-bless; anything that
    straddles either bound is a pass, with a note when the point estimate itself is past the bound.
    """
    if baseline is None:
        if not file_found:
            return Judgement(Verdict.NO_BASELINE_FILE, None, None, None, "")
        return Judgement(Verdict.NEW, None, None, None, "")
    floor = baseline * (1.0 - tolerance)
    ceiling = baseline * (1.0 + tolerance)
    change = estimate.ratio / baseline - 1.0
    if estimate.high < floor:
        note = (
            f"speedup regressed: measured {fmt_ci(estimate)} vs baseline {baseline:.3f}x; "
            f"tolerance {percent(tolerance)} puts the floor at {floor:.3f}x and the whole interval lies below it"
        )
        return Judgement(Verdict.REGRESSED, baseline, floor, change, note)
    if estimate.low > ceiling:
        note = f"improved beyond tolerance: {fmt_ci(estimate)} vs baseline {baseline:.3f}x"
        return Judgement(Verdict.IMPROVED, baseline, floor, change, note)
    note = ""
    if estimate.ratio < floor:
        note = f"point estimate {estimate.ratio:.3f}x is below the floor {floor:.3f}x, but within noise"
    return Judgement(Verdict.PASS, baseline, floor, change, note)


DIRECTIONS = ("lower", "higher")


def judge_metric(value: float, baseline: float | None, tolerance: float, direction: str, *, file_found: bool) -> Judgement:
    """A single-valued metric (compile seconds, recompiles, graph breaks, peak memory) against its baseline.

    direction 'lower': worse when value > baseline * (1 + tolerance); 'higher' the mirror image. With no
    repeated samples there is no interval: tolerance alone separates noise from change, so give noisy metrics
    (seconds) a wide one and counts (graph breaks) zero.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if baseline is None:
        return Judgement(Verdict.NO_BASELINE_FILE if not file_found else Verdict.NEW, None, None, None, "")
    worse_bound = baseline * (1 + tolerance) if direction == "lower" else baseline * (1 - tolerance)
    better_bound = baseline * (1 - tolerance) if direction == "lower" else baseline * (1 + tolerance)
    change = value / baseline - 1.0 if baseline else (0.0 if value == baseline else float("inf"))
    worse = value > worse_bound if direction == "lower" else value < worse_bound
    better = value < better_bound if direction == "lower" else value > better_bound
    sense = "lower is better" if direction == "lower" else "higher is better"
    if worse:
        note = (f"regressed: {value:g} against baseline {baseline:g} ({sense}; tolerance {percent(tolerance)} puts the "
                f"bound at {worse_bound:g})")
        return Judgement(Verdict.REGRESSED, baseline, worse_bound, change, note)
    if better:
        return Judgement(Verdict.IMPROVED, baseline, worse_bound, change,
                         f"improved beyond tolerance: {value:g} against baseline {baseline:g}")
    return Judgement(Verdict.PASS, baseline, worse_bound, change, "")
