"""Which side moved: a regressed or improved speedup explained by each side's median against the blessed entry's,
and the smallest regression a case can catch at its tolerance. Pure: numbers in, words out."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median
from typing import Any

from .hardware import software_drift

# A side's median counts as moved when it differs from the blessed one by more than this fraction: several times
# how far medians of one build on one GPU move run to run (docs/results/plugin-constants.md).
MOVED = 0.03


def side_change(now_ms: float | None, blessed_ms: Any) -> float | None:
    """now / blessed - 1 for one side's median, or None when either is missing."""
    if not now_ms or not isinstance(blessed_ms, (int, float)) or blessed_ms <= 0:
        return None
    return now_ms / float(blessed_ms) - 1.0


def _span(blessed_ms: Any, now_ms: float | None) -> str:
    return f"({float(blessed_ms):.4g} -> {now_ms:.4g} ms)"


def _words(side: str, change: float | None, now_ms: float | None, blessed_ms: Any) -> str:
    if change is None:
        return f"the {side} side has no blessed time to compare"
    if abs(change) <= MOVED:
        return f"the {side} side is unchanged {_span(blessed_ms, now_ms)}"
    sense = "slower" if change > 0 else "faster"
    return f"the {side} side is {abs(change):.0%} {sense} than when blessed {_span(blessed_ms, now_ms)}"


def which_side_moved(
    reference_ms: float | None, optimized_ms: float | None, entry: Mapping[str, Any],
    software_now: Mapping[str, Any] | None = None,
) -> tuple[str, float | None, float | None]:
    """(sentence, reference change, optimized change) for a case whose speedup left its band: which side's median
    moved since the entry was blessed, with the software that changed meanwhile."""
    ref = side_change(reference_ms, entry.get("reference_ms"))
    opt = side_change(optimized_ms, entry.get("optimized_ms"))
    if ref is not None and opt is not None and abs(ref) <= MOVED and abs(opt) <= MOVED:
        # Both sides "unchanged" beside a speedup that left its band says nothing: each side's own change is given,
        # and the one that carries more of the speedup's (a reference that runs at another speed on this card, say).
        more = "reference" if abs(ref) >= abs(opt) else "optimized"
        text = (f"neither side past {MOVED:.0%}, the {more} side the more: the reference side {ref:+.1%} "
                f"{_span(entry['reference_ms'], reference_ms)}; the optimized side {opt:+.1%} "
                f"{_span(entry['optimized_ms'], optimized_ms)}")
    else:
        text = "; ".join([_words("reference", ref, reference_ms, entry.get("reference_ms")),
                          _words("optimized", opt, optimized_ms, entry.get("optimized_ms"))])
    drift = software_drift(dict(entry.get("software", {})), dict(software_now or {}))
    if drift:
        text += f" (software since: {', '.join(drift)})"
    return f"which side moved: {text}", ref, opt


def detectable_drop(tolerance: float, noise: float | None, offset: float = 0.0) -> float | None:
    """The smallest drop of the speedup from this run's reading that this case fails on: the whole interval
    (half-width `noise`, relative) must fall below baseline x (1 - tolerance), and the reading sits `offset` from the
    baseline (speedup / baseline - 1), so a drop d is caught when (1 + offset)(1 - d)(1 + noise) < 1 - tolerance. A
    card that reads above the baseline (its kind's center) lets a larger drop through than the tolerance says; 0 for
    a reading already under the floor."""
    if noise is None or noise < 0 or offset <= -1:
        return None
    return max(0.0, 1.0 - (1.0 - tolerance) / ((1.0 + offset) * (1.0 + noise)))


def detection_summary(drops: Mapping[str, float]) -> str | None:
    """One line on the run's detection power, from each timed case's detectable drop by its id: the median, the best
    and the worst, naming the case that lets the most through."""
    if not drops:
        return None
    ordered = sorted(drops.values())
    worst = max(drops, key=lambda case: (drops[case], case))
    return (f"detection power: {len(ordered)} timed cases catch a drop of their speedup from this run's reading of at "
            f"least {median(ordered):.1%} (median; best {ordered[0]:.1%}, worst {ordered[-1]:.1%}: {worst})")
