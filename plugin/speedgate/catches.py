"""Would a slowdown of the optimized side be caught on every card of a kind? Read from a baseline file's evidence alone.

A gate study (speedgate.study) measures what an injected slowdown does on the cards it runs on. The file already holds
each calibrated entry's readings on every card that gave evidence, so the same question can be asked of each of those
cards without a GPU: each card in turn stands for a fresh one, left out of the evidence; its readings, their speedups
divided by 1 + share (the optimized side's time x (1 + share)), are judged against the center and the tolerance the
other cards give (evidence.judged_against, evidence.tolerance_of), as the gate would judge that card. Entries with
evidence from three cards or more (two left when one is out). What it leaves out, and says so: a run's own noise
(a reading at the floor is measured again), a slowdown that lands lighter or heavier than asked, and the entries'
other picks (each judged against its own evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import evidence

MIN_CARDS = 3  # one left out, two still give a center and a spread


@dataclass(frozen=True)
class Miss:
    """One card's reading that the slowdown leaves inside the band: the reading, slowed, and the floor it stays above."""

    card: str
    speedup: float
    slowed: float
    floor: float


@dataclass
class Catches:
    share: float
    entries: int = 0  # with evidence from MIN_CARDS cards or more
    readings: int = 0
    caught: int = 0
    missed: dict[str, list[Miss]] = field(default_factory=dict)  # case id -> its misses
    tolerances: dict[str, float] = field(default_factory=dict)  # case id -> the file's tolerance, for the misses
    card_counts: dict[str, int] = field(default_factory=dict)  # case id -> how many cards gave it evidence
    per_card: dict[str, list[int]] = field(default_factory=dict)  # card -> [comparisons it misses, it gave evidence to]


def check_share(share: float) -> float:
    """share, if it is a slowdown this module can read (a fraction between 0 and 1); ValueError naming it if not."""
    if not 0 < share < 1:
        raise ValueError(f"a slowdown is a fraction between 0 and 1 (0.05 for 5%), not {share:g}")
    return share


def band_without(entry: Mapping[str, Any], card: str) -> tuple[float, float]:
    """(center, tolerance) that the entry's evidence without `card` gives: the band a fresh card is judged in."""
    others = evidence.without_card(entry["calibration"], card)
    tolerance = evidence.tolerance_of(others)
    center, _ = evidence.judged_against({**entry, "calibration": others}, tolerance)
    return center, tolerance


def catches(cases: Mapping[str, Mapping[str, Any]], share: float) -> Catches:
    """Each entry's readings card by card, that card left out, slowed by `share` and judged against the other cards."""
    out = Catches(check_share(share))
    for case_id, entry in sorted(cases.items()):
        calibration = entry.get("calibration")
        if not isinstance(calibration, Mapping):
            continue
        every = evidence.cards(calibration)
        recorded = [name for name in every if name != evidence.UNRECORDED]
        if len(recorded) < MIN_CARDS:
            continue
        out.entries += 1
        for card in recorded:
            center, tolerance = band_without(entry, card)
            floor = center * (1 - tolerance)
            readings = evidence._numbers(every[card].get("speedups"), positive=True)
            misses = [Miss(card, s, s / (1 + share), floor) for s in readings if s / (1 + share) >= floor]
            out.readings += len(readings)
            out.caught += len(readings) - len(misses)
            tally = out.per_card.setdefault(card, [0, 0])
            tally[0] += bool(misses)
            tally[1] += 1
            if misses:
                out.missed.setdefault(case_id, []).extend(misses)
                out.tolerances[case_id] = float(entry.get("tolerance", 0.0))
                out.card_counts[case_id] = len(recorded)
    return out


def lines(found: Catches) -> list[str]:
    """What `python -m speedgate evidence FILE --catch SHARE` prints: each entry that misses, the card and its numbers,
    then a summary per card and for the file."""
    share = f"{found.share:.0%}" if round(found.share, 2) == found.share else f"{found.share:.1%}"
    if not found.entries:
        return [f"no comparison has evidence from {MIN_CARDS} cards or more, so none can be read with a card left out: "
                "calibrating blesses, or gate runs' reports added with `python -m speedgate evidence FILE REPORTS`, "
                f"from {MIN_CARDS} cards of this kind give it that"]
    out = [f"a {share} slowdown of the optimized side, read on each card of the evidence with that card left out "
           "(judged against the other cards' center and tolerance; a run's noise left out):"]
    for case_id, misses in found.missed.items():
        missed_on = len({m.card for m in misses})
        out.append(f"{case_id} (tolerance {found.tolerances[case_id]:.1%}): missed on {missed_on} of its "
                   f"{found.card_counts[case_id]} cards")
        out.extend(f"  card {m.card}: {m.speedup:.4g}x slowed to {m.slowed:.4g}x, over the floor {m.floor:.4g}x the "
                   "others give" for m in misses)
    short = sorted(((card, t) for card, t in found.per_card.items() if t[0]), key=lambda item: (-item[1][1], item[0]))
    out.extend(f"card {card}: {given - missing} of the {given} comparisons it gave evidence to catch it"
               for card, (missing, given) in short)
    every = found.entries - len(found.missed)
    out.append(f"{every} of {found.entries} comparisons (evidence from {MIN_CARDS} cards or more) catch a {share} "
               f"slowdown on every card of their evidence; {found.caught} of {found.readings} readings caught; "
               f"{len(short)} of {len(found.per_card)} cards miss it somewhere")
    return out
