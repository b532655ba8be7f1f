"""Does a test's optimized side time the same beside each of its references? (reads reports; no GPU)

Usage: python -m lab.side_agreement REPORT... [--over 0.02] [--case SUBSTRING]

Where one test compares one optimized side with several references (the flash kernel against eager, SDPA and the
compiled reference), each comparison times that side in its own rounds, interleaved with its own reference. Its
kernels are the same in every comparison, so its time should be too; a comparison whose timed rounds read the side
slower than the test's others, while the audit's profiler gives its kernels the same busy time, measures the
neighbour, not the kernel. For every card and test in the given reports (speedgate's --speedgate-json files: clean
runs), the comparisons whose optimized side ran the same kernels (the codegen facts' names and registers) and the same
timer: each one's timed median (`optimized_ms`) and profiler busy time (`optimized_busy_ms`) against the test's median
of each. Printed: every comparison read on two cards or more, with how many cards put its timed side more than --over
off the test's median, and the busy time's offset on those cards; with --case, every reading of the matching ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.clock_spread import read_reports
from speedgate.evidence import report_identity


def side_key(case: Mapping[str, Any]) -> str | None:
    """The optimized side's identity within a test: its timer and its kernels' names and registers; None where the
    report recorded no kernels for it."""
    kernels = ((case.get("codegen") or {}).get("optimized")) or []
    if not kernels:
        return None
    return json.dumps([case.get("timer"), sorted((k.get("name"), k.get("registers")) for k in kernels)])


def offsets(reports: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per comparison per card whose test timed the same optimized side in two comparisons or more: the
    timed and the busy time's offsets from the test's median of each on that card (None where no busy time)."""
    groups: dict[tuple[str, str, str, str], dict[str, Mapping[str, Any]]] = {}
    for report in reports:
        run = report_identity(report)  # one process's run; the same report given twice is one
        for case in report.get("cases", []):
            key = side_key(case)
            if not (key and case.get("timed") and case.get("card") and case.get("nodeid")
                    and isinstance(case.get("optimized_ms"), (int, float)) and case["optimized_ms"] > 0):
                continue
            group = (case["card"], run, case["nodeid"], key)
            groups.setdefault(group, {})[case["name"]] = case
    rows = []
    for (card, _, nodeid, _), by_name in groups.items():
        if len(by_name) < 2:
            continue
        timed_mid = statistics.median(c["optimized_ms"] for c in by_name.values())
        busy = [c["optimized_busy_ms"] for c in by_name.values() if isinstance(c.get("optimized_busy_ms"), (int, float))]
        busy_mid = statistics.median(busy) if len(busy) == len(by_name) else None
        for name, c in by_name.items():
            rows.append({"card": card, "nodeid": nodeid, "name": name, "timed_ms": c["optimized_ms"],
                         "timed": c["optimized_ms"] / timed_mid - 1.0,
                         "busy": None if busy_mid is None else c["optimized_busy_ms"] / busy_mid - 1.0})
    return rows


def summary(rows: Sequence[Mapping[str, Any]], over: float) -> list[dict[str, Any]]:
    """Per comparison read on two cards or more: its cards, the cards whose timed side was more than `over` off
    the test's median, the median busy-time offset on those cards; the most such cards first."""
    by_case: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        by_case.setdefault((r["nodeid"], r["name"]), []).append(r)
    out = []
    for (nodeid, name), found in by_case.items():
        if len({r["card"] for r in found}) < 2:
            continue
        off = [r for r in found if abs(r["timed"]) > over]
        busy = [r["busy"] for r in off if r["busy"] is not None]
        out.append({"case": f"{nodeid}::{name}", "cards": len({r["card"] for r in found}),
                    "off": sorted({r["card"] for r in off}), "timed": [r["timed"] for r in off],
                    "busy": statistics.median(busy) if busy else None})
    return sorted(out, key=lambda s: (-len(s["off"]), s["case"]))


def table(rows: Sequence[Mapping[str, Any]], over: float) -> str:
    lines = [f"| comparison | cards | cards whose timed side was over {over:.0%} off the test's median | their offsets "
             "| the busy time's offset there |", "| --- | ---: | --- | --- | --- |"]
    for s in rows:
        if not s["off"]:
            continue
        busy = "-" if s["busy"] is None else f"{s['busy']:+.2%}"
        lines.append(f"| `{s['case']}` | {s['cards']} | {len(s['off'])}: {', '.join(f'`{c}`' for c in s['off'])} | "
                     f"{', '.join(f'{t:+.1%}' for t in s['timed'])} | {busy} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.side_agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="speedgate reports (--speedgate-json) of clean runs")
    parser.add_argument("--over", type=float, default=0.02, help="how far off the test's median a timed side counts "
                        "(a fraction; default 0.02)")
    parser.add_argument("--case", action="append", default=[], help="show every reading of the comparisons whose "
                        "id holds this (repeatable)")
    args = parser.parse_args(argv)
    if not 0 < args.over < 1:
        parser.error(f"--over is a fraction between 0 and 1, got {args.over}")
    rows = offsets(read_reports(parser, args.reports))
    found = summary(rows, args.over)
    if not any(s["off"] for s in found):
        print(f"no comparison's optimized side was timed more than {args.over:.0%} off its test's others on any card")
    else:
        print(table(found, args.over))
    for wanted in args.case:
        picked = sorted((r for r in rows if wanted in f"{r['nodeid']}::{r['name']}"), key=lambda r: (r["card"], r["name"]))
        print("\n| card | comparison | timed ms | timed offset | busy offset |\n| --- | --- | ---: | ---: | ---: |")
        for r in picked:
            busy = "-" if r["busy"] is None else f"{r['busy']:+.2%}"
            print(f"| `{r['card']}` | {r['name']} | {r['timed_ms']:.4f} | {r['timed']:+.2%} | {busy} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
