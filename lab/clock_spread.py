"""How much of a comparison's spread between cards follows the card's SM clock? (reads reports; no GPU)

Usage: python -m lab.clock_spread REPORT... [--cards 8] [--top 20] [--case SUBSTRING] [--slowed REPORT...]

Under the power cap each card settles at its own SM clock, and a side timed in SM cycles
(`cuda-sm-cycles-held`) is clock-free only where its cycles do not move with the clock. Where one side's do and the
other's do not, the speedup follows the card's clock, and the cards' spread is that of their clocks.

For every comparison read on at least --cards cards in the given reports (speedgate's --speedgate-json files: a
study's clean runs, never its slowed ones), across the readings: the standard deviation of the log speedup, and
the residual deviation after a least-squares line on each side's mean SM clock during its timed rounds
(`reference_mhz`, `optimized_mhz`), with the line's slope in percent of speedup per 100 MHz. Then, for the
comparisons asked for with --case, every reading: the card, both clocks, both sides' cycle-timed milliseconds and
the speedup, sorted by the optimized side's clock.

Would a center on the clock judge better than the kind's center? Measured before adopting, card by card left out
(as lab/evidence_center.py measures a center): each card's reading against the median of the other cards' medians
(the gate's center) and against the line on the optimized side's clock fitted to the other cards' readings, at its
own clock; the tolerance each would set (CALIBRATION_K times the spread the held-out misses show, the floor under
it). With --slowed (reports of a study's slowed runs, each optimized side slowed by a known share), each slowed
reading's change from either center, at the slowed run's own clock, and whether either tolerance catches it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speedgate.evidence import calibrated_tolerance
from speedgate.evidence_cli import load_report

CLOCKS = ("reference_mhz", "optimized_mhz")


@dataclass(frozen=True)
class Line:
    """A least-squares line of the log speedup on a clock: its slope (log units per MHz), residual deviation, and the
    readings' mean clock and mean log speedup (the point it passes through)."""

    slope: float
    residual: float
    mean_clock: float = 0.0
    mean_log: float = 0.0

    def at(self, clock: float) -> float:
        """The line's log speedup at this clock."""
        return self.mean_log + self.slope * (clock - self.mean_clock)


def fit(clocks: Sequence[float], logs: Sequence[float]) -> Line:
    """The least-squares line of logs on clocks, with the residual deviation on n - 2 degrees of freedom (n >= 3)."""
    if len(clocks) != len(logs) or len(clocks) < 3:
        raise ValueError(f"a line needs at least 3 paired readings, got {len(clocks)} and {len(logs)}")
    mx, my = statistics.fmean(clocks), statistics.fmean(logs)
    sxx = sum((x - mx) ** 2 for x in clocks)
    slope = sum((x - mx) * (y - my) for x, y in zip(clocks, logs)) / sxx if sxx else 0.0
    residuals = [y - my - slope * (x - mx) for x, y in zip(clocks, logs)]
    return Line(slope, math.sqrt(sum(r * r for r in residuals) / (len(residuals) - 2)), mx, my)


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


def per_card(found: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """(optimized MHz, log speedup) of each card's readings."""
    out: dict[str, list[tuple[float, float]]] = {}
    for c in found:
        out.setdefault(c["card"], []).append((float(c["optimized_mhz"]), math.log(c["speedup"])))
    return out


def centers(cards: Mapping[str, Sequence[tuple[float, float]]]) -> tuple[float, Line]:
    """From these cards' readings: the log of the kind's center (the median of the cards' medians) and the line of
    the log speedup on the optimized side's clock."""
    center = statistics.median(statistics.median(y for _, y in r) for r in cards.values())
    points = [p for r in cards.values() for p in r]
    return center, fit([x for x, _ in points], [y for _, y in points])


def held_out(found: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each card left out in turn: its readings' log misses from the other cards' center and from their line at its
    clock; the spread of each (the root mean square of the misses) and the tolerance it would set (K times it, the
    floor under it). Needs four cards or more (three left to fit a line)."""
    by_card = per_card(found)
    if len(by_card) < 4:
        raise ValueError(f"leaving a card out needs four cards or more, got {len(by_card)}")
    plain, fitted = [], []
    for card, mine in by_card.items():
        others = {k: v for k, v in by_card.items() if k != card}
        center, line = centers(others)
        for mhz, y in mine:
            plain.append(y - center)
            fitted.append(y - line.at(mhz))
    rms = {name: math.sqrt(statistics.fmean(m * m for m in misses)) for name, misses in (("plain", plain), ("line", fitted))}
    return {"cards": len(by_card), "readings": len(plain), "worst_plain": max(map(abs, plain)),
            "worst_line": max(map(abs, fitted)), "rms_plain": rms["plain"], "rms_line": rms["line"],
            "tolerance_plain": calibrated_tolerance(rms["plain"]), "tolerance_line": calibrated_tolerance(rms["line"])}


def judged_slowed(clean: Sequence[Mapping[str, Any]], slowed: Sequence[Mapping[str, Any]],
                  tolerances: tuple[float, float]) -> list[dict[str, Any]]:
    """Each slowed reading's change from the clean cards' center and from their line at its own clock, and whether a
    drop beyond each tolerance (plain, line) catches it."""
    by_card = per_card(clean)
    center, line = centers(by_card)
    rows = []
    for c in slowed:
        y, mhz = math.log(c["speedup"]), float(c["optimized_mhz"])
        plain, fitted = math.expm1(y - center), math.expm1(y - line.at(mhz))
        rows.append({"card": c["card"], "mhz": mhz, "plain": plain,
                     "line": fitted, "caught_plain": plain < -tolerances[0], "caught_line": fitted < -tolerances[1]})
    return rows


def held_out_table(by_case: Mapping[str, Sequence[Mapping[str, Any]]], rows: Sequence[Mapping[str, Any]],
                   slowed: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    lines = ["| comparison | cards | held-out miss, center: worst, rms | on the clock: worst, rms | tolerance: center, "
             "clock | slowed readings caught: center, clock |", "| --- | ---: | --- | --- | --- | --- |"]
    for r in rows:
        h = held_out(by_case[r["case_id"]])
        judged = judged_slowed(by_case[r["case_id"]], slowed.get(r["case_id"], []),
                               (h["tolerance_plain"], h["tolerance_line"]))
        caught = (f"{sum(j['caught_plain'] for j in judged)}, {sum(j['caught_line'] for j in judged)} of {len(judged)}"
                  if judged else "-")
        lines.append(f"| `{r['case_id']}` | {h['cards']} | {h['worst_plain']:.2%}, {h['rms_plain']:.2%} | "
                     f"{h['worst_line']:.2%}, {h['rms_line']:.2%} | {h['tolerance_plain']:.1%}, "
                     f"{h['tolerance_line']:.1%} | {caught} |")
    return "\n".join(lines)


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


def read_reports(parser: argparse.ArgumentParser, paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The reports at paths (speedgate.evidence_cli.load_report); a path that holds none ends the command with a
    usage error naming it."""
    loaded = []
    for path in paths:
        try:
            loaded.append(load_report(path))
        except ValueError as error:
            parser.error(f"{path}: not a readable speedgate report ({str(error).removeprefix(f'{path}: ')})")
    return loaded


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.clock_spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="speedgate reports (--speedgate-json) of clean runs")
    parser.add_argument("--cards", type=int, default=8, help="the fewest cards a comparison is read on (default 8)")
    parser.add_argument("--top", type=int, default=20, help="the widest comparisons shown (default 20)")
    parser.add_argument("--case", action="append", default=[], help="show every reading of the comparisons whose "
                        "id holds this (repeatable)")
    parser.add_argument("--slowed", nargs="+", type=Path, default=[], help="reports of a study's slowed runs: each "
                        "judged against the clean cards' center and against their line on the clock")
    args = parser.parse_args(argv)
    by_case = readings(read_reports(parser, args.reports))
    rows = spreads(by_case, args.cards)
    if not rows:
        print(f"no comparison was read on {args.cards} cards or more with both sides' clocks", file=sys.stderr)
        return 1
    print(table(rows[: args.top]))
    print("\n" + held_out_table(by_case, [r for r in rows[: args.top] if r["cards"] >= 4],
                                readings(read_reports(parser, args.slowed))))
    for wanted in args.case:
        for case_id in sorted(k for k in by_case if wanted in k):
            print(f"\n{case_id}\n\n{case_table(by_case[case_id])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
