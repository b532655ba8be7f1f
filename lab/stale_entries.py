"""The tests whose entries in a baseline file were blessed by another speedgate than the one installed, as pytest
node ids, one per line: what a calibrating bless has to bless again before fresh cards' gate runs can add to their
evidence (`python -m speedgate evidence` leaves such entries out, naming both versions). Reads the file only; no GPU.
`lab/device/rebless_stale.sh` blesses them on a GPU.

    python -m lab.stale_entries baselines/nvidia-h100-80gb-hbm3.json            # node ids
    python -m lab.stale_entries baselines/nvidia-h100-80gb-hbm3.json --count    # entries and tests, by version
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import speedgate


def node_id(entry_id: str) -> str:
    """The test's node id of a case or metric id ('file::test[params]::name'): its file and test, no name."""
    return "::".join(entry_id.split("::")[:2])


def stale(doc: Mapping[str, Any], version: str) -> tuple[list[str], Counter[str]]:
    """(the node ids of the tests with a case entry blessed by another speedgate than `version`, sorted; how many
    case entries each version blessed). Metrics carry no evidence: they follow their test."""
    versions: Counter[str] = Counter()
    tests: set[str] = set()
    for case_id, entry in doc.get("cases", {}).items():
        blessed = str((entry.get("software") or {}).get("pytest-speedgate", "unrecorded"))
        versions[blessed] += 1
        if blessed != version:
            tests.add(node_id(case_id))
    return sorted(tests), versions


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("--version", default=speedgate.__version__, help="the speedgate version that is current "
                        "(default: the installed one)")
    parser.add_argument("--count", action="store_true", help="print the counts instead of the node ids")
    args = parser.parse_args(argv)
    tests, versions = stale(json.loads(args.baseline.read_text()), args.version)
    if args.count:
        by_version = ", ".join(f"{count} by {name}" for name, count in sorted(versions.items()))
        print(f"{args.baseline}: {sum(versions.values())} case entries ({by_version}); {len(tests)} tests to bless "
              f"again with speedgate {args.version}")
    else:
        print("\n".join(tests))


if __name__ == "__main__":
    main()
