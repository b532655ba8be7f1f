"""Blessing: what a passing result writes into its baseline file (entry fields, rounding, the rewrite rule).

bless() is pure: an existing document and results in, the new document and what changed out. bless_into()
applies it to a file under the baseline module's inter-process lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import baseline as baseline_file
from .results import CompareResult, MetricResult

# What a case's entry keeps of its result. None means "not measured" and is left out; so is graphed=False (the
# default), so that entries written before the field existed stay unchanged.
ENTRY_FIELDS = (
    "speedup", "reference_ms", "optimized_ms", "ci_low", "ci_high", "noise", "reference_cv", "optimized_cv",
    "rounds", "timer", "reference_first_ms", "optimized_first_ms", "flops", "bytes", "tolerance",
    "flops_dtype", "peak_fraction", "config", "graphed",
)
METRIC_FIELDS = ("value", "tolerance", "direction", "unit")

# An entry is rewritten only when its value moved by more than this fraction of its tolerance (or the way it was
# measured changed), so a re-bless shows real moves, not noise (as PyTorch's compile-time gate does).
REWRITE_SHARE_OF_TOLERANCE = 1.0 / 3.0


def round_value(value: Any) -> Any:
    """Four significant digits: enough for a gate with a 10% tolerance, few enough for small diffs."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value


def case_entry(result: CompareResult, software: dict[str, Any], measured_at: str) -> dict[str, Any]:
    record = result.to_json()
    entry = {name: round_value(record[name]) for name in ENTRY_FIELDS
             if record.get(name) is not None and record.get(name) is not False}
    entry["measured_at"] = measured_at
    entry["software"] = dict(software)
    return entry


def metric_entry(result: MetricResult, software: dict[str, Any], measured_at: str) -> dict[str, Any]:
    entry = {name: getattr(result, name) for name in METRIC_FIELDS}
    entry["measured_at"] = measured_at
    entry["software"] = dict(software)
    return entry


def bless(
    existing: dict[str, Any] | None,
    *,
    hardware_key: str,
    fingerprint: dict[str, Any],
    cases: Sequence[CompareResult],
    metrics: Sequence[MetricResult],
    measured_at: str,
) -> tuple[dict[str, Any], list[baseline_file.Change]]:
    """The baseline document after blessing these results into existing (None: a new file)."""
    software = fingerprint.get("software", {})
    return baseline_file.merge(
        existing,
        hardware_key=hardware_key,
        fingerprint=fingerprint,
        entries={r.case_id: case_entry(r, software, measured_at) for r in cases},
        rewrite_fraction={r.case_id: r.tolerance * REWRITE_SHARE_OF_TOLERANCE for r in cases},
        metrics={m.metric_id: metric_entry(m, software, measured_at) for m in metrics},
        metric_rewrite_fraction={m.metric_id: m.tolerance * REWRITE_SHARE_OF_TOLERANCE for m in metrics},
    )


@dataclass
class Blessed:
    """What blessing one file did: the document now on disk (None if nothing could be written), the summary lines
    and any error."""

    path: Path
    doc: dict[str, Any] | None
    lines: list[str]
    error: str | None = None


def bless_into(
    path: Path, *, hardware_key: str, fingerprint: dict[str, Any], cases: Sequence[CompareResult],
    metrics: Sequence[MetricResult],
) -> Blessed:
    """Read, bless and write path under its lock; another process blessing the same file waits its turn."""
    outcome: dict[str, Any] = {}

    def change(existing: dict[str, Any] | None) -> dict[str, Any] | None:
        doc, changes = bless(existing, hardware_key=hardware_key, fingerprint=fingerprint, cases=cases,
                             metrics=metrics, measured_at=baseline_file.now_iso())
        outcome.update(doc=doc, changes=changes, existing=existing)
        touched = any(c.action != "kept" for c in changes)
        return doc if touched or existing is None else None

    try:
        baseline_file.update(path, change)
    except baseline_file.BaselineError as exc:
        return Blessed(path, None, [], f"{exc}; nothing was written (fix or remove the file, then re-bless)")
    except OSError as exc:
        return Blessed(path, None, [], f"{path}: could not be written: {exc}; the previous file is unchanged")
    doc, changes = outcome["doc"], outcome["changes"]
    return Blessed(path, doc, summary(path, doc, changes))


def summary(path: Path, doc: dict[str, Any], changes: Iterable[baseline_file.Change]) -> list[str]:
    changes = list(changes)
    counts = {action: sum(c.action == action for c in changes) for action in ("added", "updated", "kept")}
    untouched = len(doc["cases"]) + len(doc.get("metrics", {})) - len(changes)
    lines = [
        f"baseline {path}: {counts['added']} added, {counts['updated']} updated, "
        f"{counts['kept']} kept (moved less than a third of their tolerance), {untouched} other entries untouched"
    ]
    for c in changes:
        if c.action != "kept":
            old = f"{c.old_speedup:.4g}{c.unit} -> " if c.old_speedup is not None else ""
            lines.append(f"  {c.action}: {c.case_id}: {old}{c.new_speedup:.4g}{c.unit}")
    return lines
