"""What judging against the kind's center (speedgate.evidence.judged_against) changes, read from a baseline file's own
evidence, on any machine (no GPU: the evidence was measured where the file was blessed and gated).

Leave one card out: for every entry with evidence from three cards or more and for each of those cards, the
tolerance and the center are recomputed from the other cards' evidence alone, and each of the left-out card's
speedups is judged twice, against the blessed speedup (the rule before) and against judged_against's baseline (the
rule now). A reading outside the band is what that card's next gate run would call a change without any change in
the code: below it a false alarm. And for every centered entry, the drop below the kind's center that the gate
catches under each rule (the noise of a run left out).

    python -m lab.evidence_center baselines/nvidia-h100-80gb-hbm3.json baselines/nvidia-h200.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from speedgate import evidence


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
            others = evidence.summarize({**calibration, "machines": {n: c for n, c in every.items() if n != card}})
            tolerance = evidence.tolerance_of(others)
            center, _ = evidence.judged_against({**entry, "calibration": others}, tolerance)
            for speedup in kept.get("speedups", []):
                readings += 1
                counts["blessed"][_side(speedup / entry["speedup"] - 1, tolerance)] += 1
                counts["center"][_side(speedup / center - 1, tolerance)] += 1
    return {"entries": entries, "readings": readings, **counts}


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
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    for path in parser.parse_args(argv).files:
        print("\n".join(table(path)), end="\n\n")


if __name__ == "__main__":
    main()
