"""`python -m speedgate history ...`: fill the store from reports, find change points, draw the page."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..baseline import now_iso
from ..export import REPORT_VERSION
from ..options import number
from .changes import DEFAULT_DROP, DEFAULT_PENALTY, DetectorMissing, Series, changes_in, order_by_movement
from .store import HistoryError, count_runs, group_series, parse_time, read_points, record_report

USAGE = """python -m speedgate history --db PATH [--drop FRACTION] [--case TEXT] [--hardware-key KEY]
       python -m speedgate history import --db PATH [--commit SHA]... [--branch NAME]... REPORT.json...
       python -m speedgate history page --db PATH --out PAGE.html [--png DIR]"""


class ReportError(ValueError):
    """A file given to import that is not a --speedgate-json report."""


def _fraction(text: str) -> float:
    value = number(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in (0, 1), e.g. 0.02 for 2 percent")
    return value


def _positive(text: str) -> float:
    value = number(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def read_report(path: Path) -> dict[str, Any]:
    """A --speedgate-json report, checked enough to be recorded."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(doc, dict) or "speedgate_report_version" not in doc or not isinstance(doc.get("cases"), list):
        raise ReportError(f"{path}: not a --speedgate-json report (no speedgate_report_version and cases list)")
    version = doc["speedgate_report_version"]
    if not isinstance(version, int) or version > REPORT_VERSION:
        raise ReportError(f"{path}: report version {version!r}, newer than this speedgate reads ({REPORT_VERSION})")
    for entry in [*doc["cases"], *doc.get("metrics", [])]:
        if not isinstance(entry, dict) or "verdict" not in entry or "hardware_key" not in entry or not (
                "case_id" in entry or "metric_id" in entry):
            raise ReportError(f"{path}: an entry without case_id/metric_id, hardware_key and verdict: {entry!r:.200}")
    return doc


def run_time_of(path: Path, doc: Mapping[str, Any]) -> str:
    """When a report's run happened, in UTC ("...Z"): its own run_time or created_at when it carries one, else the
    file's modification time (a report is written at the end of its run; copying it as an artifact may move the
    time). The history orders runs by it, whatever order the reports are imported in."""
    for key in ("run_time", "created_at"):
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            when = parse_time(value)
            if when is None:
                raise ReportError(f"{path}: its {key} {value!r} is not an ISO 8601 time")
            return _iso(when)
    return _iso(datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).replace(microsecond=0))


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def _per_report(values: list[str] | None, count: int, flag: str) -> list[str | None]:
    if not values:
        return [None] * count
    if len(values) == 1:
        return [values[0]] * count
    if len(values) != count:
        raise ReportError(f"{flag} given {len(values)} times for {count} reports: give it once (for all) or once per report")
    return list(values)


def import_reports(db: Path, paths: Sequence[Path], commits: list[str] | None, branches: list[str] | None) -> int:
    """Record each report as a run (its place in the history is its run time, not the order given); every report is
    read and checked before any is recorded."""
    docs = [read_report(path) for path in paths]
    times = [run_time_of(path, doc) for path, doc in zip(paths, docs)]
    per_commit = _per_report(commits, len(paths), "--commit")
    per_branch = _per_report(branches, len(paths), "--branch")
    for path, doc, run_time, commit, branch in zip(paths, docs, times, per_commit, per_branch):
        recorded = record_report(
            db, doc, source=str(path), run_time=run_time, recorded_at=now_iso(),
            commit=commit or doc.get("commit"), branch=branch or doc.get("branch"))
        if recorded.run_id is None:
            print(f"{path}: already recorded as run {recorded.duplicate_of}, skipped")
        else:
            print(f"{path}: run {recorded.run_id} (ran {run_time}), {recorded.rows} rows, commit "
                  f"{commit or doc.get('commit') or 'unknown'}")
    return 0


def load_series(db: Path, *, penalty: float = DEFAULT_PENALTY, case: str | None = None,
                hardware_key: str | None = None) -> list[Series]:
    """Every case's series in the store (filtered), with its change points, the ones that moved first."""
    found = []
    for (ident, key), points in sorted(group_series(read_points(db)).items()):
        if (case is None or case in ident) and (hardware_key is None or hardware_key == key):
            found.append(changes_in(points, penalty=penalty))
    return order_by_movement(found)


def describe(series: Series, drop: float) -> list[str]:
    """The lines `history` prints for one series."""
    last = series.points[-1]
    head = (f"{series.ident} [{series.hardware_key}]: {len(series.points)} runs, now {last.speedup:.3f}x, "
            f"noise {series.noise:.2%}, {len(series.changes)} change{'s' * (len(series.changes) != 1)}")
    lines = [head]
    for change in series.changes:
        lines.append(f"  run {change.run_before} -> {change.run_after} ({change.commits()}): {change.before:.3f}x -> "
                     f"{change.after:.3f}x ({change.size:+.1%})")
    move, start = series.latest_move, series.moved_at
    if move is not None and start is not None:
        verdict = ("a rise" if move >= 0 else f"a drop of {drop:.0%} or more" if series.dropped(drop)
                   else f"accepted by the re-bless at run {series.reblessed_at}" if series.reblessed_at is not None
                   else "within the threshold")
        lines.append(f"  latest move: {move:+.1%} since run {start.run_after} ({start.commits()}): {verdict}")
    return lines


def detect(db: Path, drop: float, penalty: float, case: str | None, hardware_key: str | None) -> int:
    series = load_series(db, penalty=penalty, case=case, hardware_key=hardware_key)
    print(f"{db}: {count_runs(db)} runs, {len(series)} series (case x hardware key); change points by PELT, penalty "
          f"{penalty:g} x noise^2 x log(runs)")
    moved = [s for s in series if s.changes]
    for s in moved:
        for line in describe(s, drop):
            print(line)
    print(f"{len(series) - len(moved)} series without a change")
    dropped = [s for s in series if s.dropped(drop)]
    if dropped:
        print(f"speedgate history: {len(dropped)} series whose latest move is a drop of {drop:.0%} or more: "
              + ", ".join(f"{s.ident} [{s.hardware_key}]" for s in dropped), file=sys.stderr)
        return 1
    return 0


def page(db: Path, out: Path, png_dir: Path | None, penalty: float) -> int:
    from .page import write_page

    series = load_series(db, penalty=penalty)
    write_page(out, series, title=f"speedgate history: {db.name}", runs=count_runs(db))
    print(f"{out}: {len(series)} charts, {sum(bool(s.changes) for s in series)} with change points")
    if png_dir is not None:
        from .png import write_pngs

        written = write_pngs(png_dir, series)
        print(f"{png_dir}: {len(written)} PNG files")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m speedgate history", usage=USAGE,
                                     description="the history of gate runs: record, find change points, draw")
    parser.add_argument("--db", type=Path, required=True, help="the history store (SQLite)")
    parser.add_argument("--penalty", type=_positive, default=DEFAULT_PENALTY,
                        help=f"change-point penalty in units of noise^2 x log(runs) (default: {DEFAULT_PENALTY:g})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    command = args_in[0] if args_in and args_in[0] in ("import", "page") else None
    parser = _parser()
    if command == "import":
        parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
        parser.add_argument("--commit", action="append", help="the reports' commit: once for all, or once per report")
        parser.add_argument("--branch", action="append", help="the reports' branch: once for all, or once per report")
    elif command == "page":
        parser.add_argument("--out", type=Path, required=True, help="the HTML page to write")
        parser.add_argument("--png", type=Path, default=None, metavar="DIR", help="also a PNG per case in DIR (matplotlib)")
    else:
        parser.add_argument("--drop", type=_fraction, default=DEFAULT_DROP,
                            help=f"exit 1 when a series' latest move is a drop of this fraction or more (default: {DEFAULT_DROP})")
        parser.add_argument("--case", default=None, help="only cases whose id contains this text")
        parser.add_argument("--hardware-key", default=None, help="only this hardware key")
    args = parser.parse_args(args_in[1:] if command else args_in)
    try:
        if command == "import":
            return import_reports(args.db, args.reports, args.commit, args.branch)
        if command == "page":
            return page(args.db, args.out, args.png, args.penalty)
        return detect(args.db, args.drop, args.penalty, args.case, args.hardware_key)
    except (HistoryError, ReportError, DetectorMissing, RuntimeError) as exc:
        print(f"speedgate history: {exc}", file=sys.stderr)
        return 2
