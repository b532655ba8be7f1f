"""`python -m speedgate compare OLD NEW`: the gate's judgement between two runs or two baseline files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from .hardware import software_drift
from .report import align
from .stats import RatioEstimate
from .verdict import SEVERITY, Verdict, judge


class CompareInputError(ValueError):
    """A file that is neither a baseline file nor a speedgate JSON report."""


def load_cases(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """({case_id: entry}, software versions) from a baseline file or a --speedgate-json report."""
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
        return cases, doc["fingerprint"].get("software", {})
    if isinstance(cases, list) and "speedgate_report_version" in doc:
        timed = {c["case_id"]: c for c in cases if c.get("timed") and c.get("speedup")}
        software: dict[str, Any] = {}
        for fp in doc.get("fingerprints", {}).values():
            software = fp.get("software", {})
        return timed, software
    raise CompareInputError(f"{path}: neither a speedgate baseline file nor a --speedgate-json report")


def compare(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], tolerance: float | None) -> list[dict[str, Any]]:
    """One row per case: NEW's interval judged against OLD's speedup, as the gate judges a run."""
    rows = []
    for case_id in sorted(set(old) | set(new)):
        o, n = old.get(case_id), new.get(case_id)
        if n is None:
            rows.append({"case_id": case_id, "old": o["speedup"], "new": None, "verdict": "missing", "change": None, "note": "not in NEW"})
            continue
        if o is None:
            rows.append({"case_id": case_id, "old": None, "new": n["speedup"], "verdict": Verdict.NEW.value, "change": None, "note": ""})
            continue
        tol = tolerance if tolerance is not None else float(n.get("tolerance") or o.get("tolerance") or 0.10)
        estimate = RatioEstimate(n["speedup"], n.get("ci_low", n["speedup"]), n.get("ci_high", n["speedup"]), 0.95, int(n.get("rounds") or 0))
        j = judge(estimate, o["speedup"], tol, file_found=True)
        rows.append({"case_id": case_id, "old": o["speedup"], "new": n["speedup"], "ci": (estimate.low, estimate.high),
                     "verdict": j.verdict.value, "change": j.change, "note": j.note, "tolerance": tol})
    order = {**{v.value: k for v, k in SEVERITY.items()}, "missing": 3}
    return sorted(rows, key=lambda r: (order.get(r["verdict"], 9), r["case_id"]))


def format_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    header = ("case", "old", "new", "95% CI (new)", "change", "verdict")
    cells = [header]
    for r in rows:
        ci = f"{r['ci'][0]:.3f}-{r['ci'][1]:.3f}" if r.get("ci") else "-"
        cells.append((
            r["case_id"],
            f"{r['old']:.3f}x" if r["old"] is not None else "-",
            f"{r['new']:.3f}x" if r["new"] is not None else "-",
            ci,
            f"{r['change']:+.1%}" if r["change"] is not None else "-",
            r["verdict"],
        ))
    return align(cells)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speedgate", description="speedgate's command-line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp_parser = sub.add_parser("compare", help="judge NEW's speedups against OLD's (baseline files or --speedgate-json reports)")
    cmp_parser.add_argument("old", type=Path)
    cmp_parser.add_argument("new", type=Path)
    cmp_parser.add_argument("--tolerance", type=float, default=None, help="override every case's tolerance (default: the case's own, else 0.10)")
    args = parser.parse_args(argv)
    if args.tolerance is not None and not 0.0 <= args.tolerance < 1.0:
        parser.error(f"--tolerance {args.tolerance} must be a fraction in [0, 1)")
    try:
        old, old_sw = load_cases(args.old)
        new, new_sw = load_cases(args.new)
    except CompareInputError as exc:
        parser.exit(2, f"speedgate compare: {exc}\n")
    rows = compare(old, new, args.tolerance)
    print(f"OLD {args.old} ({len(old)} cases) -> NEW {args.new} ({len(new)} cases)")
    drift = software_drift(old_sw, new_sw)
    if drift:
        print(f"software: {', '.join(drift)}")
    for line in format_rows(rows):
        print(line)
    regressed = sum(r["verdict"] == Verdict.REGRESSED.value for r in rows)
    print(f"{regressed} regressed, {sum(r['verdict'] == Verdict.IMPROVED.value for r in rows)} improved, "
          f"{sum(r['verdict'] == Verdict.PASS.value for r in rows)} within tolerance, "
          f"{sum(r['verdict'] == Verdict.NEW.value for r in rows)} new, {sum(r['verdict'] == 'missing' for r in rows)} missing")
    return 1 if regressed else 0
