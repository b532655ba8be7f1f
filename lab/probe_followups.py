"""Which latency-timed cases a study's clean runs ask lab.drift_probe to look at: those of CASE_TESTS with a
comparison that did not pass at its first measurement (any verdict but a pass, or a pass the gate measured again
before it stood), once each, in CASE_TESTS' order.

    python -m lab.probe_followups CLEAN_REPORT.json ...     # prints one drift_probe --case per line

lab/device/study_chain.sh runs the probe on the same card right after the clean run, before the slowed ones, while the
card is in the state the comparison failed in (issue 46: the training step's slide on a power-capped card, whose
cause the probe could not be run to find; in the twenty-second study it slid under the floor and passed on a third
measurement: docs/results/gate-study-h200.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lab.drift_probe import CASE_TESTS
from speedgate.evidence_cli import load_report


def followups(reports: Iterable[Mapping[str, Any]]) -> list[str]:
    """The drift_probe cases whose test has a comparison in these reports that did not pass at once: not a pass, or
    a pass re-measured (its first measurement left the verdict open)."""
    open_at_first = {str(c.get("case_id", "")) for r in reports for c in r.get("cases") or []
                     if c.get("verdict") != "pass" or c.get("remeasured")}
    return [case for case, test in CASE_TESTS.items() if any(c.startswith(test + "::") for c in open_at_first)]


def main(argv: list[str]) -> int:
    reports = []
    for path in argv:
        try:
            reports.append(load_report(Path(path)))
        except ValueError as exc:  # one a run left half-written: the others still say what to probe
            print(f"probe_followups: {path}: not read ({str(exc).removeprefix(f'{path}: ')})", file=sys.stderr)
    print("\n".join(followups(reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
