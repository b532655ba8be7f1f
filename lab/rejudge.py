"""A study's reports judged again against another baseline file, on the CPU: what the gate would have said.

    python -m lab.rejudge BASELINE.json STUDY_DIR [--share 0.05]

STUDY_DIR holds a `python -m speedgate study` folder's reports (clean*.json, slow<share>-*.json). Each timed
comparison's recorded interval (ci_low, speedup, ci_high: the measurement its verdict was given on) is judged against
BASELINE.json's entry as the plugin judges it now: the entry's other pick when the kernels are one
(speedgate.picks), the entry's calibrated tolerance (or the case's pinned one), the cards' center, and the
pick-changed rules (speedgate.judging.check_pick, pass_on_race, passed_on_another_pick). Then the study's table
and its catch line.

--rule NAME (one of lab.evidence_center.RULES) writes every calibrated entry's tolerance, and its other picks', from
its evidence by that rule's spread before judging: what another tolerance rule would have caught and cried wolf on.
Run it on the file the study was judged against (the study's cards had given it no evidence), not on one that has
taken the study's clean run since.

Not modelled: measuring again (the recorded interval is the last measurement's), inconclusive, and a change of
the case itself since the run. A count from this tool is an estimate of the verdicts, never a measurement: a results
page says which it is.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.evidence_center import RULES
from speedgate import picks
from speedgate import tolerance as tolerances
from speedgate.attribution import which_side_moved
from speedgate.evidence import calibrated_tolerance, judged_against, round_value
from speedgate.judging import check_pick, pass_on_race, passed_on_another_pick
from speedgate.stats import RatioEstimate
from speedgate.study import table
from speedgate.verdict import Verdict, judge


def retolerated(entry: Mapping[str, Any], rule: Callable[[Mapping[str, Any]], float]) -> dict[str, Any]:
    """entry with its tolerance, and each of its other picks', written from its own evidence by rule (a spread of a
    calibration, as lab.evidence_center.RULES), as speedgate writes it from evidence.spread_of."""

    def written(part: Mapping[str, Any]) -> dict[str, Any]:
        calibration = part.get("calibration")
        if not isinstance(calibration, Mapping) or not calibration or "tolerance" not in part:
            return dict(part)
        return {**part, "tolerance": float(round_value(calibrated_tolerance(rule(calibration))))}

    out = written(entry)
    if isinstance(entry.get("picks"), list):
        out["picks"] = [written(pick) if isinstance(pick, Mapping) else pick for pick in entry["picks"]]
    return out


def verdict(record: Mapping[str, Any], entry: Mapping[str, Any] | None) -> str:
    """The verdict the plugin would give this recorded measurement against entry (see the module)."""
    if entry is None or not record.get("timed") or not record.get("speedup"):
        return str(record.get("verdict"))
    judged, _ = picks.judged_entry(entry, record.get("codegen"))
    assert judged is not None
    if record.get("tolerance_pinned"):
        tolerance = float(record["tolerance"])
    else:
        tolerance = tolerances.calibrated(judged) or float(record["tolerance"])
    baseline, _ = judged_against(judged, tolerance)
    estimate = RatioEstimate(float(record["speedup"]), float(record.get("ci_low") or record["speedup"]),
                             float(record.get("ci_high") or record["speedup"]), 0.95, int(record.get("rounds") or 1))
    judgement = judge(estimate, baseline, tolerance, file_found=True)
    found = judgement.verdict
    if found in (Verdict.REGRESSED, Verdict.IMPROVED):
        _, ref, opt = which_side_moved(record.get("reference_ms"), record.get("optimized_ms"), judged)
        pick = check_pick(judgement, float(record["speedup"]), {"reference_change": ref, "optimized_change": opt},
                          judged.get("codegen"), record.get("codegen"), optimized_ms=record.get("optimized_ms"),
                          busy_ms=record.get("optimized_busy_ms"))
        if pick is not None and pick.explains:
            found = Verdict.PICK_CHANGED
    elif raced := pass_on_race(judgement, float(record["speedup"]), judged.get("codegen"), record.get("codegen"),
                               sides_ms={side: record.get(f"{side}_ms") for side in ("reference", "optimized")},
                               busy_ms={side: record.get(f"{side}_busy_ms") for side in ("reference", "optimized")}):
        found = raced[0]
    elif passed_on_another_pick(found, judged.get("codegen"), record.get("codegen")):
        found = Verdict.PICK_CHANGED
    return found.value


def rejudged(report: Mapping[str, Any], cases: Mapping[str, Any]) -> dict[str, Any]:
    """The report with each timed case's verdict given again against `cases`, and its tolerance the one used."""
    out = []
    for record in report.get("cases", []):
        entry = cases.get(record.get("case_id"))
        again = dict(record, verdict=verdict(record, entry))
        if entry is not None and not record.get("tolerance_pinned"):
            judged, _ = picks.judged_entry(entry, record.get("codegen"))
            again["tolerance"] = tolerances.calibrated(judged) or record.get("tolerance")
        out.append(again)
    return {**report, "cases": out}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.rejudge", description=__doc__.split("\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("study", type=Path)
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--rule", choices=sorted(RULES), help="write the tolerances by this rule first (see the module)")
    args = parser.parse_args(argv)
    cases = json.loads(args.baseline.read_text())["cases"]
    if args.rule:
        cases = {case_id: retolerated(entry, RULES[args.rule]) for case_id, entry in cases.items()}
    clean = [rejudged(json.loads(p.read_text()), cases) for p in sorted(args.study.glob("clean*.json"))]
    slowed: dict[float, list[dict[str, Any]]] = {}
    for path in sorted(args.study.glob("slow*.json")):
        share = float(path.stem[len("slow"):].rsplit("-", 1)[0])
        slowed.setdefault(share, []).append(rejudged(json.loads(path.read_text()), cases))
    print(table(clean, slowed, args.share), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
