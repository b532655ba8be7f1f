"""What judging against the kind's center (speedgate.evidence.judged_against) changes, read from a baseline file's own
evidence, on any machine (no GPU: the evidence was measured where the file was blessed and gated).

Leave one card out: for every entry with evidence from three cards or more and for each of those cards, the
tolerance and the center are recomputed from the other cards' evidence alone, and each of the left-out card's
speedups is judged twice, against the blessed speedup (the rule before) and against judged_against's baseline (the
rule now). A reading outside the band is what that card's next gate run would call a change without any change in
the code: below it a false alarm. And for every centered entry, the drop below the kind's center that the gate
catches under each rule (the noise of a run left out). Then each left-out card's readings slowed by 5% and by 10%
(speedgate.catches, what `python -m speedgate evidence FILE --catch 0.05` prints): which comparisons would miss that
slowdown on which card of the kind, read from the evidence alone, where a gate study measures one or two cards a
session.

    python -m lab.evidence_center baselines/nvidia-h100-80gb-hbm3.json baselines/nvidia-h200.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from speedgate import evidence
from speedgate.catches import band_without, catches
from speedgate.catches import lines as catch_lines


def _side(change: float, tolerance: float) -> str:
    return "inside" if abs(change) <= tolerance else ("below" if change < 0 else "above")


def leave_one_card_out(cases: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of the left-out cards' readings inside, below and above the band, under each rule."""
    counts = {rule: {"inside": 0, "below": 0, "above": 0} for rule in ("blessed", "center")}
    entries = readings = 0
    for entry in cases.values():
        calibration = entry.get("calibration")
        if not isinstance(calibration, Mapping):
            continue
        every = evidence.cards(calibration)
        by_card = {name: c for name, c in every.items() if name != evidence.UNRECORDED}
        if len(by_card) < 3:
            continue
        entries += 1
        for card, kept in by_card.items():
            center, tolerance = band_without(entry, card)
            for speedup in kept.get("speedups", []):
                readings += 1
                counts["blessed"][_side(speedup / entry["speedup"] - 1, tolerance)] += 1
                counts["center"][_side(speedup / center - 1, tolerance)] += 1
    return {"entries": entries, "readings": readings, **counts}


# Candidate tolerance rules (issue 46), each a spread the tolerance max(floor, K x spread) is made of, beside the one
# speedgate uses (evidence.spread_of: the widest in-process spread and the range of every process pooled over cards).
def robust_spread(calibration: Mapping[str, Any]) -> float:
    """A spread one outlier cannot widen: the median in-process spread, the median spread of a card's own processes
    and 1.4826 x the MAD of the cards' medians over their median (the range for two cards), the largest of the
    three."""
    import statistics

    by_card = evidence.cards(calibration)
    medians = [m for name, c in by_card.items() if name != evidence.UNRECORDED
               if (m := evidence._median(evidence._numbers(c.get("speedups"), positive=True))) is not None]
    if not medians:
        return evidence.spread_of(calibration)
    runs = [v for c in by_card.values() for v in evidence._numbers(c.get("run_spreads"), positive=False)]
    own = [evidence.between_run_spread(v) for c in by_card.values()
           if len(v := evidence._numbers(c.get("speedups"), positive=True)) >= 2]
    between = 0.0
    if len(medians) >= 3:
        center = statistics.median(medians)
        between = 1.4826 * statistics.median(abs(m - center) for m in medians) / center
    elif len(medians) == 2:
        between = evidence.between_run_spread(medians)
    return max(statistics.median(runs) if runs else 0.0, statistics.median(own) if own else 0.0, between)


def trimmed_spread(calibration: Mapping[str, Any]) -> float:
    """speedgate's spread with the one process farthest from the pooled median left out (five processes or more)."""
    import statistics

    pooled = [v for c in evidence.cards(calibration).values() for v in evidence._numbers(c.get("speedups"), positive=True)]
    runs = evidence._numbers(calibration.get("process_run_spreads"), positive=False)
    if len(pooled) >= 5:
        middle = statistics.median(pooled)
        pooled.remove(max(pooled, key=lambda v: abs(v - middle)))
    return max([*runs, *([evidence.between_run_spread(pooled)] if len(pooled) >= 2 else [])], default=0.0)


def pooled_spread(calibration: Mapping[str, Any]) -> float:
    """speedgate's spread with the in-process part pooled instead of the widest: the root mean square of the processes'
    run spreads (the pooled within-process deviation, as an analysis of variance pools its groups'), beside the range
    of every process pooled over the cards, as before. One process whose two runs differed widens it by its share."""
    import math

    runs = evidence._numbers(calibration.get("process_run_spreads"), positive=False)
    pooled = calibration.get("process_spread")
    inside = math.sqrt(sum(v * v for v in runs) / len(runs)) if runs else 0.0
    return max(inside, float(pooled) if isinstance(pooled, (int, float)) else 0.0)


SHARES = (0.05, 0.10)  # the slowdowns asked about (speedgate.catches): issue 46's targets
RULES = {"speedgate's": evidence.spread_of, "robust (MAD)": robust_spread, "trimmed range": trimmed_spread,
         "pooled in-process": pooled_spread}


def rules_left_out(cases: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per rule of RULES: the left-out cards' readings inside, below and above the band around the center the other
    cards give (leave_one_card_out, against the center), and how many entries' tolerances on all their evidence
    lie over 5% and over 10%."""
    out: dict[str, dict[str, Any]] = {}
    for name, spread in RULES.items():
        tol = lambda calibration, spread=spread: float(evidence.round_value(evidence.calibrated_tolerance(spread(calibration))))  # noqa: E731
        counts = {"inside": 0, "below": 0, "above": 0}
        tolerances = []
        for entry in cases.values():
            calibration = entry.get("calibration")
            if not isinstance(calibration, Mapping):
                continue
            tolerances.append(tol(calibration))
            every = evidence.cards(calibration)
            if sum(1 for card in every if card != evidence.UNRECORDED) < 3:
                continue
            for card, kept in every.items():
                if card == evidence.UNRECORDED:
                    continue
                others = evidence.without_card(calibration, card)
                tolerance = tol(others)
                center, _ = evidence.judged_against({**entry, "calibration": others}, tolerance)
                for speedup in kept.get("speedups", []):
                    counts[_side(speedup / center - 1, tolerance)] += 1
        out[name] = {**counts, "over_5": sum(t > 0.05 for t in tolerances), "over_10": sum(t > 0.10 for t in tolerances)}
    return out


def caught_drops(cases: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, float, float]]:
    """(case, drop below the center caught before, caught now) for every entry whose baseline is now its center."""
    rows = []
    for case_id, entry in cases.items():
        if "tolerance" not in entry:
            continue
        tolerance = entry["tolerance"]
        center, cards = evidence.judged_against(entry, tolerance)  # the center wherever cards > 0
        if cards:
            rows.append((case_id, 1 - entry["speedup"] * (1 - tolerance) / center, tolerance))
    return rows


def table(path: Path) -> list[str]:
    cases = json.loads(path.read_text())["cases"]
    out = leave_one_card_out(cases)
    drops = caught_drops(cases)
    lines = [f"{path.name}: {out['entries']} entries with evidence from 3 cards or more, {out['readings']} readings",
             "| rule | inside the band | below (false alarm) | above |", "| --- | ---: | ---: | ---: |"]
    for rule, name in (("blessed", "against the blessed speedup"), ("center", "against the kind's center")):
        c = out[rule]
        lines.append(f"| {name} | {c['inside']} | {c['below']} | {c['above']} |")
    moved = sorted(drops, key=lambda row: row[2] - row[1])
    lines.append(f"{len(drops)} entries judged against their center; the largest changes in the drop below the center "
                 "that the gate catches (before -> now):")
    lines.extend(f"- `{case}`: {before:.1%} -> {now:.1%}" for case, before, now in
                 [*moved[:5], *[r for r in moved[::-1][:3] if r not in moved[:5]]])
    lines += ["Tolerance rules, each card left out (readings against the other cards' center) and the tolerances on "
              "all the evidence:", "| rule | inside | below (false alarm) | above | tolerances over 5% | over 10% |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, c in rules_left_out(cases).items():
        lines.append(f"| {name} | {c['inside']} | {c['below']} | {c['above']} | {c['over_5']} | {c['over_10']} |")
    for share in SHARES:
        lines.extend(catch_lines(catches(cases, share)))
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    for path in parser.parse_args(argv).files:
        print("\n".join(table(path)), end="\n\n")


if __name__ == "__main__":
    main()
