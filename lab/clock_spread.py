"""How much of a comparison's spread between cards follows the card's SM clock? (reads reports; no GPU)

Usage: python -m lab.clock_spread REPORT... [--cards 8] [--top 20] [--case SUBSTRING]

Under the power cap each card settles at its own SM clock, and a side timed in SM cycles
(`cuda-sm-cycles-held`) is clock-free only where its cycles do not move with the clock. Where one side's do and the
other's do not, the speedup follows the card's clock, and the cards' spread is that of their clocks.

For every comparison read on at least --cards cards in the given reports (speedgate's --speedgate-json files: a
study's clean runs, never its slowed ones), across the readings: the standard deviation of the log speedup, and
the residual deviation after a least-squares line on each side's mean SM clock during its timed rounds
(`reference_mhz`, `optimized_mhz`), with the line's slope in percent of speedup per 100 MHz. Then, for the
comparisons asked for with --case, every reading: the card, both clocks, both sides' cycle-timed milliseconds and
the speedup, sorted by the optimized side's clock.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLOCKS = ("reference_mhz", "optimized_mhz")


@dataclass(frozen=True)
class Line:
    """A least-squares line of the log speedup on a clock: its slope (log units per MHz) and residual deviation."""

    slope: float
    residual: float


def fit(clocks: Sequence[float], logs: Sequence[float]) -> Line:
    """The least-squares line of logs on clocks, with the residual deviation on n - 2 degrees of freedom (n >= 3)."""
    if len(clocks) != len(logs) or len(clocks) < 3:
        raise ValueError(f"a line needs at least 3 paired readings, got {len(clocks)} and {len(logs)}")
    mx, my = statistics.fmean(clocks), statistics.fmean(logs)
    sxx = sum((x - mx) ** 2 for x in clocks)
    slope = sum((x - mx) * (y - my) for x, y in zip(clocks, logs)) / sxx if sxx else 0.0
    residuals = [y - my - slope * (x - mx) for x, y in zip(clocks, logs)]
    return Line(slope, math.sqrt(sum(r * r for r in residuals) / (len(residuals) - 2)))


def readings(reports: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Each comparison's timed readings that carry a card and both sides' clocks, one per (card, judged_at)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    seen: set[tuple[str, str, str]] = set()
    for report in reports:
        for case in report.get("cases", []):
            if not (case.get("timed") and case.get("card") and isinstance(case.get("speedup"), (int, float))
                    and case["speedup"] > 0 and all(isinstance(case.get(c), (int, float)) for c in CLOCKS)):
                continue
            key = (case["case_id"], case["card"], str(case.get("judged_at")))
            if key not in seen:
                seen.add(key)
                out.setdefault(case["case_id"], []).append(case)
    return out


def spreads(by_case: Mapping[str, Sequence[Mapping[str, Any]]], cards: int) -> list[dict[str, Any]]:
    """Per comparison read on `cards` cards or more: its readings, cards, timer, the log speedup's deviation and the
    line on each side's clock; the widest first."""
    rows = []
    for case_id, found in by_case.items():
        if len({c["card"] for c in found}) < max(cards, 3):
            continue
        logs = [math.log(c["speedup"]) for c in found]
        rows.append({"case_id": case_id, "readings": len(found), "cards": len({c["card"] for c in found}),
                     "timer": found[0].get("timer"), "spread": statistics.stdev(logs),
                     **{clock: fit([c[clock] for c in found], logs) for clock in CLOCKS}})
    return sorted(rows, key=lambda r: -r["spread"])


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| comparison | readings (cards) | timer | spread | on the reference's clock: residual, slope | "
             "on the optimized side's clock: residual, slope |", "| --- | ---: | --- | ---: | --- | --- |"]
    for r in rows:
        on = [f"{r[c].residual:.2%}, {r[c].slope * 100:+.2%} per 100 MHz" for c in CLOCKS]
        lines.append(f"| `{r['case_id']}` | {r['readings']} ({r['cards']}) | {r['timer']} | {r['spread']:.2%} | "
                     f"{on[0]} | {on[1]} |")
    return "\n".join(lines)


def case_table(found: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| card | reference MHz | optimized MHz | reference ms (cycles) | optimized ms (cycles) | speedup |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in sorted(found, key=lambda c: c["optimized_mhz"]):
        lines.append(f"| `{c['card']}` | {c['reference_mhz']:.0f} | {c['optimized_mhz']:.0f} | "
                     f"{c.get('reference_ms', float('nan')):.4f} | {c.get('optimized_ms', float('nan')):.4f} | "
                     f"{c['speedup']:.4f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.clock_spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="speedgate reports (--speedgate-json) of clean runs")
    parser.add_argument("--cards", type=int, default=8, help="the fewest cards a comparison is read on (default 8)")
    parser.add_argument("--top", type=int, default=20, help="the widest comparisons shown (default 20)")
    parser.add_argument("--case", action="append", default=[], help="show every reading of the comparisons whose "
                        "id holds this (repeatable)")
    args = parser.parse_args(argv)
    loaded = []
    for path in args.reports:
        try:
            loaded.append(json.loads(path.read_text()))
        except (OSError, ValueError) as error:
            parser.error(f"{path}: not a readable speedgate report ({error})")
    by_case = readings(loaded)
    rows = spreads(by_case, args.cards)
    if not rows:
        print(f"no comparison was read on {args.cards} cards or more with both sides' clocks", file=sys.stderr)
        return 1
    print(table(rows[: args.top]))
    for wanted in args.case:
        for case_id in sorted(k for k in by_case if wanted in k):
            print(f"\n{case_id}\n\n{case_table(by_case[case_id])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
