"""`python -m speedgate compare OLD NEW`: the gate's judgement between two runs or two baseline files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .attribution import detectable_drop, detection_summary, which_side_moved
from .hardware import software_drift
from .report import align
from .stats import RatioEstimate
from .tolerance import CALIBRATED, DEFAULT_CPU_TOLERANCE, DEFAULT_TOLERANCE, Tolerance, resolve
from .verdict import Verdict, by_severity, judge, judge_metric


class CompareInputError(ValueError):
    """A file that is neither a baseline file nor a speedgate JSON report."""


@dataclass(frozen=True)
class RunFile:
    """What one file holds: cases and metrics by id (each with its hardware key), and the software they were
    measured with."""

    cases: dict[str, dict[str, Any]]
    metrics: dict[str, dict[str, Any]]
    software: dict[str, Any]


@dataclass(frozen=True)
class Row:
    """One case or metric judged: NEW against OLD."""

    ident: str
    old: float | None
    new: float | None
    verdict: Verdict
    change: float | None = None
    ci: tuple[float, float] | None = None
    tolerance: float | None = None
    note: str = ""
    detects: float | None = None  # the smallest drop NEW's interval would have flagged at this tolerance


def load(path: Path) -> RunFile:
    """A baseline file or a --speedgate-json report, validated."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CompareInputError(f"{path}: cannot be read as JSON: {exc}") from None
    cases = doc.get("cases") if isinstance(doc, dict) else None
    if isinstance(cases, dict) and "hardware_key" in doc:
        from .baseline import BaselineError, validate

        try:
            validate(doc, path)
        except BaselineError as exc:
            raise CompareInputError(str(exc)) from None
        key = doc["hardware_key"]
        return RunFile({k: {**v, "hardware_key": key} for k, v in cases.items()}, dict(doc.get("metrics", {})),
                       doc["fingerprint"].get("software", {}))
    if isinstance(cases, list) and "speedgate_report_version" in doc:
        timed = {c["case_id"]: c for c in cases if c.get("timed") and c.get("speedup")}
        metrics = {m["metric_id"]: m for m in doc.get("metrics", [])}
        software: dict[str, Any] = {}
        for fp in doc.get("fingerprints", {}).values():
            software = fp.get("software", {})
        return RunFile(timed, metrics, software)
    raise CompareInputError(f"{path}: neither a speedgate baseline file nor a --speedgate-json report")


def _absent(ident: str, o: Mapping[str, Any] | None, n: Mapping[str, Any] | None, key: str) -> Row | None:
    if n is None and o is not None:
        return Row(ident, o[key], None, Verdict.MISSING, note="not in NEW")
    if o is None and n is not None:
        return Row(ident, None, n[key], Verdict.NEW)
    return None


def case_tolerance(old: Mapping[str, Any], new: Mapping[str, Any], override: float | None) -> Tolerance:
    """The tolerance NEW is judged with against OLD: the gate's rule (speedgate.tolerance.resolve), with --tolerance as
    the configured default. The case's own tolerance= is known when NEW is a report (tolerance_pinned); a calibrated
    tolerance comes from OLD's baseline entry, or from NEW's report when the gate used one there."""
    pinned = new.get("tolerance") if new.get("tolerance_pinned") else None
    entry: Mapping[str, Any] | None = old if "calibration" in old else None
    if entry is None and new.get("tolerance_source") == CALIBRATED:
        entry = {"calibration": "from the report", "tolerance": new.get("tolerance")}
    key = str(new.get("hardware_key") or old.get("hardware_key") or "")
    return resolve(key, pinned=pinned, entry=entry, configured=override)


def compare(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]], tolerance: float | None) -> list[Row]:
    """One row per case: NEW's interval judged against OLD's speedup, as the gate judges a run."""
    rows = []
    for case_id in sorted(set(old) | set(new)):
        o, n = old.get(case_id), new.get(case_id)
        absent = _absent(case_id, o, n, "speedup")
        if absent is not None or o is None or n is None:
            rows.append(absent or Row(case_id, None, None, Verdict.MISSING))
            continue
        tol = case_tolerance(o, n, tolerance).value
        estimate = RatioEstimate(n["speedup"], n.get("ci_low", n["speedup"]), n.get("ci_high", n["speedup"]), 0.95,
                                 int(n.get("rounds") or 0))
        j = judge(estimate, o["speedup"], tol, file_found=True)
        note = j.note
        if j.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
            note = f"{note}; {which_side_moved(n.get('reference_ms'), n.get('optimized_ms'), o, n.get('software'))[0]}"
        rows.append(Row(case_id, o["speedup"], n["speedup"], j.verdict, j.change, (estimate.low, estimate.high), tol, note,
                        detectable_drop(tol, estimate.rel_halfwidth, n["speedup"] / o["speedup"] - 1)
                        if n.get("ci_low") is not None else None))
    return by_severity(rows)


def compare_metrics(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]) -> list[Row]:
    """One row per metric: NEW's value judged against OLD's with OLD's tolerance and direction."""
    rows = []
    for metric_id in sorted(set(old) | set(new)):
        o, n = old.get(metric_id), new.get(metric_id)
        absent = _absent(metric_id, o, n, "value")
        if absent is not None or o is None or n is None:
            rows.append(absent or Row(metric_id, None, None, Verdict.MISSING))
            continue
        j = judge_metric(float(n["value"]), float(o["value"]), float(o["tolerance"]), o.get("direction", "lower"),
                         file_found=True)
        rows.append(Row(metric_id, o["value"], n["value"], j.verdict, j.change, None, float(o["tolerance"]), j.note))
    return by_severity(rows)


def format_rows(rows: Sequence[Row], unit: str = "x") -> list[str]:
    header = ("case" if unit == "x" else "metric", "old", "new", "95% CI (new)" if unit == "x" else "tolerance",
              "change", "verdict")
    cells = [header]
    for r in rows:
        if unit == "x":
            extra = f"{r.ci[0]:.3f}-{r.ci[1]:.3f}" if r.ci else "-"
        else:
            extra = f"{r.tolerance:.0%}" if r.tolerance is not None else "-"
        cells.append((
            r.ident,
            f"{r.old:.3f}{unit}" if r.old is not None else "-",
            f"{r.new:.3f}{unit}" if r.new is not None else "-",
            extra,
            f"{r.change:+.1%}" if r.change is not None and r.change != float("inf") else "-",
            r.verdict.value,
        ))
    return align(cells)


def tally(rows: Sequence[Row]) -> str:
    def count(v: Verdict) -> int:
        return sum(r.verdict is v for r in rows)

    return (f"{count(Verdict.REGRESSED)} regressed, {count(Verdict.IMPROVED)} improved, {count(Verdict.PASS)} within "
            f"tolerance, {count(Verdict.NEW)} new, {count(Verdict.MISSING)} missing")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speedgate", description="speedgate's command-line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp_parser = sub.add_parser("compare", help="judge NEW's speedups against OLD's (baseline files or --speedgate-json reports)")
    cmp_parser.add_argument("old", type=Path)
    cmp_parser.add_argument("new", type=Path)
    cmp_parser.add_argument("--tolerance", type=float, default=None,
                            help="the default tolerance of cases that name none and have no calibrated entry, a fraction "
                                 f"(default: {DEFAULT_TOLERANCE}, {DEFAULT_CPU_TOLERANCE} on cpu- hardware keys: the gate's "
                                 "rule)")
    args = parser.parse_args(argv)
    if args.tolerance is not None and not 0.0 <= args.tolerance < 1.0:
        parser.error(f"--tolerance {args.tolerance} must be a fraction in [0, 1)")
    try:
        old, new = load(args.old), load(args.new)
    except CompareInputError as exc:
        parser.exit(2, f"speedgate compare: {exc}\n")
    print(f"OLD {args.old} ({len(old.cases)} cases, {len(old.metrics)} metrics) -> "
          f"NEW {args.new} ({len(new.cases)} cases, {len(new.metrics)} metrics)")
    drift = software_drift(old.software, new.software)
    if drift:
        print(f"software: {', '.join(drift)}")
    shared = (set(old.cases) & set(new.cases)) | (set(old.metrics) & set(new.metrics))
    if not shared and (old.cases or old.metrics) and (new.cases or new.metrics):
        print("speedgate compare: OLD and NEW share no case and no metric, so nothing was compared (files of "
              "different hardware keys, or renamed tests?)", file=sys.stderr)
        return 2
    metric_rows = compare_metrics(old.metrics, new.metrics)
    if metric_rows:
        for line in format_rows(metric_rows, unit=""):
            print(line)
        print(f"metrics: {tally(metric_rows)}")
    rows = compare(old.cases, new.cases, args.tolerance)
    for line in format_rows(rows):
        print(line)
    for r in rows:
        if r.verdict in (Verdict.REGRESSED, Verdict.IMPROVED) and r.note:
            print(f"{r.ident}: {r.note}")
    power = detection_summary({r.ident: r.detects for r in rows if r.detects is not None})
    if power:
        print(power)
    print(tally(rows))
    regressed = any(r.verdict == Verdict.REGRESSED for r in [*rows, *metric_rows])
    return 1 if regressed else 0
