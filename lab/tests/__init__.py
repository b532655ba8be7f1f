"""The lab's own tests (CPU): its probes' plumbing and its variant kernels, through the interpreter or compiled for
sm_90 without a GPU."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def written_reports(folder: Path, reports: Iterable[dict[str, Any]]) -> list[Path]:
    """Each report written as folder/clean<i>.json, as a study's clean runs leave them: the paths, in order."""
    paths = []
    for i, report in enumerate(reports):
        paths.append(folder / f"clean{i}.json")
        paths[-1].write_text(json.dumps(report))
    return paths
