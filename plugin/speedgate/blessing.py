"""Blessing: what a passing result writes into its baseline file (entry fields, rounding, the rewrite rule).

bless() is pure: an existing document and results in, the new document and what changed out. bless_into()
applies it to a file under the baseline module's inter-process lock.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import baseline as baseline_file
from . import picks as pick_book
from .evidence import (
    CALIBRATION_CEILING,
    CALIBRATION_FLOOR,
    CALIBRATION_K,
    PROCESSES_KEPT,
    add_process,
    aged_out,
    aged_out_line,
    between_run_spread,
    calibrated_tolerance,
    card_count,
    round_value,
    tolerance_of,
)
from .hardware import software_drift
from .results import CompareResult, MetricResult

# What a case's entry keeps of its result. None means "not measured" and is left out; so is graphed=False (the
# default), so that entries written before the field existed stay unchanged.
ENTRY_FIELDS = (
    "speedup", "reference_ms", "optimized_ms", "ci_low", "ci_high", "noise", "reference_cv", "optimized_cv",
    "rounds", "timer", "reference_first_ms", "optimized_first_ms", "flops", "bytes", "tolerance",
    "flops_dtype", "peak_fraction", "config", "graphed", "codegen", "reference_event_ms", "optimized_event_ms",
    "reference_mhz", "optimized_mhz",
)
METRIC_FIELDS = ("value", "tolerance", "direction", "unit")

# An entry is rewritten only when its value moved by more than this fraction of its tolerance (or the way it was
# measured changed), so a re-bless shows real moves, not noise (as PyTorch's compile-time gate does).
REWRITE_SHARE_OF_TOLERANCE = 1.0 / 3.0


# --speedgate-calibrate: an entry's tolerance and its evidence are speedgate.evidence's (max(floor, K x spread) over
# every process of every card that calibrated it).
__all__ = ["CALIBRATION_CEILING", "CALIBRATION_FLOOR", "CALIBRATION_K", "PROCESSES_KEPT", "Blessed", "between_run_spread",
           "bless", "bless_into", "calibrated_tolerance", "round_value", "summary", "widened_between_processes"]


def case_entry(result: CompareResult, software: dict[str, Any], measured_at: str) -> dict[str, Any]:
    record = result.to_json()
    entry = {name: round_value(record[name]) for name in ENTRY_FIELDS
             if record.get(name) is not None and record.get(name) is not False}
    entry["measured_at"] = measured_at
    entry["software"] = dict(software)
    # A calibrated case's tolerance is measured, and the gate uses it (unless the case pins one: its reason is in
    # a comment beside its compare(); the spread stays in the JSON report, not in the entry).
    if result.calibration_runs is not None and result.calibration_spread is not None and not result.tolerance_pinned:
        entry["tolerance"] = round_value(calibrated_tolerance(result.calibration_spread))
        entry["calibration"] = {"runs": result.calibration_runs, "spread": round_value(result.calibration_spread),
                                "measured_at": measured_at}
    return entry


def _across_processes(entry: dict[str, Any], own: Mapping[str, Any] | None, card: str | None) -> dict[str, Any]:
    """A calibrated entry adds its process (judged speedup, in-process spread, the card that measured it) to the
    evidence of earlier calibrated blesses and gate runs of the same case, software, way of timing and pick, on this
    card and on others (`own`: what the old entry recorded of this pick; None starts the evidence again); the
    tolerance covers all of it (speedgate.evidence).

    The recorded `config` (an autotuner's choice) does not start the evidence again: which config wins the race
    differs between processes, and for a case that races in every run that is the between-process spread the gate
    must tolerate (an example: docs/results/plugin-constants.md). A case that holds its autotuner to the blessed
    config (Perf.blessed_config) races only in a plain re-bless, so its calibrating processes measure one kernel.

    Kernels that are another pick than the entry's (speedgate.picks.same_pick: any fact of a side's kernels other
    than blessed; a compiled reference's other template, a compiled side's other registers) are that pick's
    evidence, never the old pick's: the evidence goes on from that pick's own when the entry had seen it among its
    picks, else starts again, and the old main pick is kept among the entry's picks (speedgate.picks), so a later
    run of it is judged against its own speedup (`python -m speedgate evidence` sorts gate runs by the same rule)."""
    calibration = entry.get("calibration")
    if calibration is None or not isinstance(entry.get("speedup"), (int, float)):
        return entry
    prior = (own or {}).get("calibration")
    evidence = add_process(prior if isinstance(prior, dict) else {}, card, float(entry["speedup"]),
                           float(calibration["spread"]), calibration["measured_at"], blessed=True)
    evidence.update(runs=calibration["runs"], spread=calibration["spread"], measured_at=calibration["measured_at"])
    return {**entry, "tolerance": tolerance_of(evidence), "calibration": evidence}


def _same_setup(entry: dict[str, Any], old: Mapping[str, Any] | None) -> bool:
    """Whether an entry was blessed with the software, graph mode and timer of the old one: its picks are the old
    one's picks (another setup measures another thing and starts everything again). Software one of them does not
    record cannot differ (a version speedgate began to record since, such as the ptxas)."""
    return old is not None and all(old.get(k) == entry.get(k) for k in ("graphed", "timer")) and not software_drift(
        dict(old.get("software") or {}), dict(entry.get("software") or {}))


def _keep_calibration(entry: dict[str, Any], result: CompareResult, own: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plain re-bless keeps an entry's calibrated tolerance and its evidence (calibrating takes N times as long,
    and its date says how old it is), unless the case now pins its own tolerance. What it keeps is its pick's own
    (`own`: the old entry, or the other pick of it that this bless's kernels are; the old main's evidence stays
    with the old main, among the picks)."""
    if own is not None and "calibration" in own and "calibration" not in entry and not result.tolerance_pinned:
        entry = {**entry, "tolerance": own["tolerance"], "calibration": own["calibration"]}
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
    test_seconds: Mapping[str, float] | None = None,
) -> tuple[dict[str, Any], list[baseline_file.Change]]:
    """The baseline document after blessing these results into existing (None: a new file). test_seconds: the
    seconds each blessed test took, by test id (baseline.merge_seconds keeps them)."""
    software = fingerprint.get("software", {})
    old = existing["cases"] if existing else {}

    def entry(r: CompareResult, previous: dict[str, Any] | None) -> dict[str, Any]:
        new = case_entry(r, software, measured_at)
        own, others = pick_book.after_bless(new, previous)
        setup = _same_setup(new, previous)
        blessed = _keep_calibration(_across_processes(new, own if setup else None, r.card), r, own)
        return {**blessed, "picks": others} if setup and others else blessed

    entries = {r.case_id: entry(r, old.get(r.case_id)) for r in cases}
    return baseline_file.merge(
        existing,
        hardware_key=hardware_key,
        fingerprint=fingerprint,
        entries=entries,
        rewrite_fraction={case_id: e["tolerance"] * REWRITE_SHARE_OF_TOLERANCE for case_id, e in entries.items()},
        metrics={m.metric_id: metric_entry(m, software, measured_at) for m in metrics},
        metric_rewrite_fraction={m.metric_id: m.tolerance * REWRITE_SHARE_OF_TOLERANCE for m in metrics},
        test_seconds=test_seconds,
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
    metrics: Sequence[MetricResult], measured_at: str, known: Collection[str] | None = None,
    test_seconds: Mapping[str, float] | None = None,
) -> Blessed:
    """Read, bless and write path under its lock; another process blessing the same file waits its turn. measured_at:
    the run's time, as its reports give it; known: the entries the file held when this run read it (see summary);
    test_seconds: the blessed tests' seconds, by test id."""
    outcome: dict[str, Any] = {}

    def change(existing: dict[str, Any] | None) -> dict[str, Any] | None:
        doc, changes = bless(existing, hardware_key=hardware_key, fingerprint=fingerprint, cases=cases,
                             metrics=metrics, measured_at=measured_at, test_seconds=test_seconds)
        outcome.update(doc=doc, changes=changes, existing=existing)
        # The tests' seconds ride along with a rewrite, never make one: nothing moved, the file is left as it was.
        touched = any(c.action != "kept" for c in changes)
        return doc if touched or existing is None else None

    try:
        baseline_file.update(path, change)
    except baseline_file.BaselineError as exc:
        return Blessed(path, None, [], f"{exc}; nothing was written (fix or remove the file, then re-bless)")
    except OSError as exc:
        return Blessed(path, None, [], f"{path}: could not be written: {exc}; the previous file is unchanged")
    doc, changes = outcome["doc"], outcome["changes"]
    return Blessed(path, doc, summary(path, doc, changes, known, outcome.get("existing")))


def summary(path: Path, doc: dict[str, Any], changes: Iterable[baseline_file.Change],
            known: Collection[str] | None = None, before: Mapping[str, Any] | None = None) -> list[str]:
    """What a bless did to one file. known: the entries the file held when this run read it (None: not known); an
    entry it holds now but did not then was written by another run meanwhile, and is said to be that run's. before:
    the file as this bless read it, to name the cards whose evidence aged out."""
    changes = list(changes)
    theirs = [c for c in changes if known is not None and c.old_speedup is not None and c.case_id not in known]
    # Every change counted, another run's entries too (the lines below name them): the counts add up to the run's.
    counts = {action: sum(c.action == action for c in changes) for action in ("added", "updated", "kept")}
    untouched = len(doc["cases"]) + len(doc.get("metrics", {})) - len(changes)
    lines = [
        f"baseline {path}: {counts['added']} added, {counts['updated']} updated, "
        f"{counts['kept']} kept (moved less than a third of their tolerance), {untouched} other entries untouched"
    ]
    if theirs:
        entries = "1 entry was" if len(theirs) == 1 else f"{len(theirs)} entries were"
        lines.append(f"  {entries} written by another run while this one ran (a concurrent bless), counted above: "
                     "where this run's measurement moved less than a third of their tolerance, theirs stays")
    for c in changes:
        if c in theirs:
            now = "kept theirs" if c.action == "kept" else "replaced by this run's"
            lines.append(f"  written meanwhile by another run, {now}: {c.case_id}: {c.old_speedup:.4g}{c.unit} "
                         f"(this run: {c.new_speedup:.4g}{c.unit})")
        elif c.action != "kept":
            old = f"{c.old_speedup:.4g}{c.unit} -> " if c.old_speedup is not None else ""
            lines.append(f"  {c.action}: {c.case_id}: {old}{c.new_speedup:.4g}{c.unit}")
            restart = f"{shlex.quote(str(path))} --restart {shlex.quote(c.case_id)}"
            widened = widened_between_processes(doc["cases"].get(c.case_id), restart)
            if widened:
                lines.append(f"    {widened}")
            old_entry = ((before or {}).get("cases") or {}).get(c.case_id) or {}
            dropped = aged_out(old_entry.get("calibration"), (doc["cases"].get(c.case_id) or {}).get("calibration"))
            if dropped:
                lines.append(f"    {aged_out_line(c.case_id, dropped)}")
            gone = pick_book.dropped(old_entry, doc["cases"].get(c.case_id))
            if gone:
                lines.append(f"    {pick_book.dropped_line(c.case_id, gone)}")
    return lines


def widened_between_processes(entry: dict[str, Any] | None, restart: str = "FILE --restart CASE_ID") -> str | None:
    """A calibrated entry whose tolerance the spread between processes set above the floor: said at bless time,
    because the evidence merges blesses of the same software, not of the same code. If the case's code changed
    between those processes, its tolerance is loosened by the change itself and its evidence should start again from
    the bless of the new code (speedgate.evidence.restart). `restart`: the arguments of the command the line
    advises, with the file and the case where the caller knows them."""
    calibration = (entry or {}).get("calibration")
    if entry is None or not calibration or entry["tolerance"] <= CALIBRATION_FLOOR:
        return None
    speedups = calibration.get("process_speedups") or []
    between = calibration.get("process_spread")
    run_spreads = [v for v in calibration.get("process_run_spreads", []) if isinstance(v, (int, float))]
    if len(speedups) < 2 or between is None or between <= max(run_spreads, default=0.0):
        return None
    where = f"processes on {card_count(calibration)} cards" if card_count(calibration) > 1 else "processes"
    return (f"tolerance {entry['tolerance']:.1%} set by the spread between {where} (speedups "
            f"{', '.join(f'{v:.4g}' for v in speedups)}): if the case's code changed between those blesses, start its "
            f"evidence again from this bless: python -m speedgate evidence {restart}")
