"""`python -m speedgate evidence BASELINE.json REPORT.json ...`: add gate runs' speedups to the evidence of a baseline
file's calibrated entries (speedgate.evidence.add_reports), under the file's lock; or show the evidence by card; or,
with --restart CASE_ID, start an entry's evidence again from its newest bless (speedgate.evidence.restart) or,
given reports, from those runs alone (speedgate.evidence.cleared); or, with
--catch SHARE, say which comparisons a slowdown of SHARE would pass on which card of the evidence (speedgate.catches)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import baseline as baseline_file
from .catches import catches, check_share
from .catches import lines as catch_lines
from .evidence import SPINS_SUFFIX, STUDY_SLOWDOWN, UNRECORDED, add_reports, card_count, cards, cleared, restart
from .options import number


def load_report(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(doc, dict) or "speedgate_report_version" not in doc:
        raise ValueError(f"{path}: not a --speedgate-json report")
    # A gate study's slowed run has its spins file beside it (speedgate.injection), also one from before the study
    # stamped its slowed reports: never evidence.
    spins = path.with_suffix(SPINS_SUFFIX)
    settings = doc.setdefault("settings", {})
    if isinstance(settings, dict) and settings.get(STUDY_SLOWDOWN) is None and spins.exists():
        settings[STUDY_SLOWDOWN] = f"the share in {spins.name}"
    return doc


def show(doc: dict[str, Any]) -> list[str]:
    """A line per calibrated entry: its tolerance and the cards and processes behind it; then a line per other pick
    of it (speedgate.picks), with its own."""
    lines = []
    for case_id, entry in sorted(doc["cases"].items()):
        if not entry.get("calibration"):
            continue
        lines.append(f"{case_id}: {_evidence_line(entry)}")
        for index, pick in enumerate(entry.get("picks") or []):
            lines.append(f"  other pick {index + 1} ({float(pick['speedup']):.4g}x): {_evidence_line(pick)}")
    return lines


def _evidence_line(entry: dict[str, Any]) -> str:
    calibration = entry.get("calibration") or {}
    by_card = cards(calibration)
    parts = [f"{'unrecorded cards' if name == UNRECORDED else 'card ' + name}: "
             + ", ".join(f"{v:.4g}" for v in c.get("speedups", [])) for name, c in sorted(by_card.items())]
    spread = calibration.get("machine_spread")
    between = f"; between cards {spread:.2%}" if isinstance(spread, (int, float)) else ""
    return f"tolerance {entry['tolerance']:.1%}{between}; " + "; ".join(parts)


def _started_again(cases: dict[str, Any], case_id: str, start: Callable[[Any], dict[str, Any]]) -> float:
    """Replaces the named entry in cases by start's (evidence.restart or evidence.cleared) and returns its tolerance
    before; BaselineError naming the case id where there is no such entry or start refuses it."""
    entry = cases.get(case_id)
    if entry is None:
        raise baseline_file.BaselineError(f"{case_id}: no such entry in the file")
    try:
        cases[case_id] = start(entry)
    except ValueError as exc:
        raise baseline_file.BaselineError(f"{case_id}: cannot restart its evidence: {exc}") from None
    return float(entry["tolerance"])


def _restarted(existing: dict[str, Any], case_ids: Sequence[str], said: list[str]) -> dict[str, Any]:
    """existing with each named entry's evidence restarted (a line each into said); BaselineError naming the first
    case id that cannot be, so that nothing is written."""
    cases = dict(existing["cases"])
    for case_id in case_ids:
        before = _started_again(cases, case_id, restart)
        fresh = cases[case_id]
        card = next(iter(cards(fresh["calibration"])))
        said.append(f"{case_id}: evidence restarted from its bless on card {card} ({float(fresh['speedup']):.4g}x): "
                    f"tolerance {before:.1%} -> {fresh['tolerance']:.1%}")
    return {**existing, "cases": cases}


def _restarted_from(existing: dict[str, Any], case_ids: Sequence[str], reports: Sequence[dict[str, Any]],
                    said: list[str], notes: list[str]) -> dict[str, Any]:
    """existing with each named entry's evidence started again from the reports' processes of it alone (the new
    code's gate runs; the bless stays the entry's speedup, judged against their cards' center): a line each into said,
    the reports' notes into notes. BaselineError naming the first case id that cannot be (no such entry, none
    calibrated, or reports of fewer than two of its cards: one card is no kind's center), so that nothing is
    written."""
    cases = dict(existing["cases"])
    before = {case_id: _started_again(cases, case_id, cleared) for case_id in case_ids}
    doc, _, left_out = add_reports({**existing, "cases": cases}, reports, only=case_ids)
    for case_id in case_ids:
        entry = doc["cases"][case_id]
        count = card_count(entry["calibration"])
        processes = len(entry["calibration"].get("process_speedups") or [])
        if count < 2:
            why = "".join(f"; {line}" for line in left_out)
            raise baseline_file.BaselineError(
                f"{case_id}: cannot restart its evidence from these reports: the file takes {processes} of their "
                f"runs of it, on {count} recorded card(s) (a run on the CPU records none), and a kind's center needs "
                f"two cards or more{why}")
        said.append(f"{case_id}: evidence restarted from {processes} gate run(s) on {count} cards: tolerance "
                    f"{before[case_id]:.1%} -> {entry['tolerance']:.1%}")
    notes.extend(left_out)
    return doc


def _share_arg(text: str) -> float:
    """--catch's value (catches.check_share), or argparse's own message naming what is wrong with it."""
    share = number(text)
    try:
        return check_share(share)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def file_and_reports(command: str, description: str, reports_help: str) -> argparse.ArgumentParser:
    """The parser of a command that reads a baseline file and --speedgate-json reports (evidence, schedule)."""
    parser = argparse.ArgumentParser(prog=f"python -m speedgate {command}", description=description)
    parser.add_argument("baseline", type=Path, help="the baseline file (baselines/<hardware_key>.json)")
    parser.add_argument("reports", type=Path, nargs="*", help=reports_help)
    return parser


def read_reports(parser: argparse.ArgumentParser, paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The reports at paths (load_report); a path that is none ends the command (exit 2), naming it."""
    try:
        return [load_report(path) for path in paths]
    except ValueError as exc:
        parser.exit(2, f"speedgate {parser.prog.rpartition(' ')[2]}: {exc}\n")


def main(argv: Sequence[str]) -> int:
    parser = file_and_reports(
        "evidence", "add the speedups of gate runs (--speedgate-json reports of the code the file was blessed from) to "
                    "the calibration evidence of a baseline file's calibrated entries, one process per report and "
                    "card, and rewrite their tolerances; without reports, show the evidence by card",
        "--speedgate-json reports of gate runs")
    parser.add_argument("--restart", metavar="CASE_ID", action="append", default=[],
                        help="start this entry's evidence again from its newest calibrating bless alone, dropping "
                             "the processes and other picks before it (for a case whose code changed since them), "
                             "or, with reports, from those gate runs of the new code alone (two cards or more); "
                             "repeat for more entries")
    parser.add_argument("--case", metavar="CASE_ID", action="append", default=[],
                        help="add the reports' evidence of this entry only, the file's other entries left as they "
                             "are (an entry whose gate runs drew a pick of the compiler's that it does not hold yet); "
                             "repeat for more entries")
    parser.add_argument("--facts-only", action="store_true",
                        help="record only the kernels' facts the entries lack from runs of the same kernels (a race "
                             "and a share, read since the bless), and none of the reports' speedups: no tolerance "
                             "moves")
    parser.add_argument("--catch", metavar="SHARE", type=_share_arg,
                        help="read only: would a slowdown of the optimized side by SHARE (0.05: 5%%) be caught on each "
                             "card of the evidence? Each card left out in turn, its readings slowed, judged against the "
                             "other cards' center and tolerance; prints the comparisons and cards that would miss it")
    args = parser.parse_intermixed_args(argv)  # reports after an option, as before it
    if args.catch is not None and (args.reports or args.restart or args.case or args.facts_only):
        parser.exit(2, "speedgate evidence: --catch reads the file's evidence and writes nothing: give it alone\n")
    if args.facts_only and not args.reports:
        parser.exit(2, "speedgate evidence: --facts-only records the facts of reports: give reports\n")
    if args.restart and (args.case or args.facts_only):
        parser.exit(2, "speedgate evidence: --restart takes the restarted entries' runs alone: give it without "
                       "--case and --facts-only\n")
    if args.case and not args.reports:
        parser.exit(2, "speedgate evidence: --case names the entries whose evidence the reports add: give reports\n")
    reports = read_reports(parser, args.reports)
    missing = [case for case in args.case if not any(c.get("case_id") == case for r in reports for c in r["cases"])]
    if missing:
        parser.exit(2, f"speedgate evidence: no report measured {missing[0]}; the file was left untouched\n")
    changed: list[str] = []
    notes: list[str] = []
    writes = bool(reports or args.restart)

    def change(existing: dict[str, Any] | None) -> dict[str, Any] | None:
        if existing is None:
            raise baseline_file.BaselineError(f"{args.baseline}: no such baseline file")
        if args.restart:
            if reports:
                return _restarted_from(existing, args.restart, reports, changed, notes)
            return _restarted(existing, args.restart, changed)
        doc, lines, left_out = add_reports(existing, reports, facts_only=args.facts_only, only=args.case)
        changed.extend(lines)
        notes.extend(left_out)
        return doc if reports else None

    try:
        doc = baseline_file.update(args.baseline, change) if writes else baseline_file.read(args.baseline)
    except baseline_file.BaselineError as exc:
        parser.exit(2, f"speedgate evidence: {exc}; the file was left untouched\n")
    if doc is None:
        parser.exit(2, f"speedgate evidence: {args.baseline}: no such baseline file\n")
    if args.restart:
        for line in [*changed, *notes]:
            print(line)
        return 0
    if args.catch is not None:
        for line in catch_lines(catches(doc["cases"], args.catch)):
            print(line)
        return 0
    for line in [*changed, *notes] if reports else show(doc):
        print(line)
    if reports:
        print(f"{args.baseline}: {len(reports)} report(s) read; {len(changed)} tolerance(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
