"""Baseline files: read and validate, merge blessed results, write atomically. Imports jsonschema lazily."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
SCHEMA_RESOURCE = "baseline-v1.schema.json"


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and what is wrong."""


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("speedgate").joinpath("schema", SCHEMA_RESOURCE).read_text(encoding="utf-8")
    return json.loads(text)


def validate(doc: Any, path: Path | str) -> None:
    """Raise BaselineError naming path and the first schema violation."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise BaselineError(f"{path}: does not match the baseline schema at {where}: {first.message}{more}")


def read(path: Path) -> dict[str, Any] | None:
    """The validated contents of path, or None when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot be read: {exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}: is not valid JSON: {exc}") from exc
    validate(doc, path)
    return doc


@dataclass(frozen=True)
class Change:
    """What an update did to one case: 'added', 'updated' or 'kept' (moved less than the rewrite threshold)."""

    case_id: str
    action: str
    old_speedup: float | None
    new_speedup: float
    unit: str = "x"  # "x" for a case's speedup, "" for a metric's value


def _merge_section(
    old: dict[str, Any], entries: dict[str, dict[str, Any]], rewrite_fraction: dict[str, float], value_key: str
) -> tuple[dict[str, Any], list[Change]]:
    unit = "x" if value_key == "speedup" else ""
    merged = dict(old)
    changes = []
    for case_id in sorted(entries):
        new = entries[case_id]
        previous = merged.get(case_id)
        if previous is None:
            merged[case_id] = new
            changes.append(Change(case_id, "added", None, new[value_key], unit))
            continue
        base = abs(previous[value_key]) or 1.0
        moved = abs(new[value_key] - previous[value_key]) / base
        method_changed = any(new.get(k) != previous.get(k) for k in ("config", "graphed", "timer"))
        if moved > rewrite_fraction.get(case_id, 0.0) or method_changed:
            merged[case_id] = new
            changes.append(Change(case_id, "updated", previous[value_key], new[value_key], unit))
        else:
            changes.append(Change(case_id, "kept", previous[value_key], new[value_key], unit))
    return merged, changes


def merge(
    existing: dict[str, Any] | None,
    *,
    hardware_key: str,
    fingerprint: dict[str, Any],
    entries: dict[str, dict[str, Any]],
    rewrite_fraction: dict[str, float],
    metrics: dict[str, dict[str, Any]] | None = None,
    metric_rewrite_fraction: dict[str, float] | None = None,
) -> tuple[dict[str, Any], list[Change]]:
    """Fold blessed entries into a baseline document; cases and metrics not given are kept as they are.

    An entry already present is rewritten only when its value (a case's speedup, a metric's value) moved by more
    than its rewrite fraction (a third of its tolerance), or its configuration or way of timing changed (config,
    graphed, timer), so a re-bless shows real moves, not noise.
    """
    cases, changes = _merge_section(existing["cases"] if existing else {}, entries, rewrite_fraction, "speedup")
    old_metrics = (existing or {}).get("metrics", {})
    merged_metrics, metric_changes = _merge_section(old_metrics, metrics or {}, metric_rewrite_fraction or {}, "value")
    changes += metric_changes
    touched = any(c.action != "kept" for c in changes)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "hardware_key": hardware_key,
        # The fingerprint is the one of the latest run that changed something.
        "fingerprint": fingerprint if touched or not existing else existing["fingerprint"],
        "updated_at": now_iso() if touched or not existing else existing.get("updated_at", now_iso()),
        "cases": cases,
    }
    if merged_metrics:
        doc["metrics"] = merged_metrics
    return doc, changes


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def dumps(doc: dict[str, Any]) -> str:
    """Stable formatting: sorted keys, two-space indent, trailing newline, so a re-bless is a small diff."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Validate, write to a temporary file beside path, then rename over it: readers never see half a file."""
    validate(doc, path)
    text = dumps(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def update(path: Path, change: Any) -> dict[str, Any] | None:
    """Read path (validated; None when missing), call change(existing), write what it returns (None: nothing).

    Placeholder without the inter-process lock (the baseline-safety branch brings it)."""
    doc = change(read(path))
    if doc is not None:
        write_atomic(path, doc)
    return doc
