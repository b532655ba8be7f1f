"""The picks of one entry: the speedup each kernel pick of a case was blessed at.

With the same code and software, an autotuner, inductor or a library can pick other kernels from one process to the
next: a compiled reference's GELU at another block size, a compiled side's reduction with other registers. Each pick
runs at its own speed. An entry holds its main pick (its `codegen`, speedup, times, tolerance and evidence) and,
under `picks`, each other pick seen with the same software, timer and graph mode, with its own speedup, times,
tolerance and evidence. A run whose kernels are one of those picks is judged against that pick's numbers, so that a
slowdown is caught whichever pick the process got, and a flip between known picks is no false alarm. Kernels never
seen are judged against the pick they are nearest to, by the share of the run's kernel time that differs from it,
where nearer than the main pick by the entry's tolerance (an edit, or a study's injected spin, on top of another pick
is judged against that pick's speedup, not a slower main pick's), else the main pick, and named (`pick-changed` only
when the other pick explains the whole move: speedgate.judging). One pick's speedups never widen another's tolerance.

Pure: entries in, entries out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import codegen

# What an entry keeps of each other pick (the schema's `pick`), and how many other picks (the latest). A compiled case
# draws inductor's picks of several kernels at once, so their combinations add up: the H200 file's large-model entry
# held 6 picks seen on cards by 2026-11-28 (docs/results/suite-time.md, "the longest work first"), and a pick dropped
# for room is judged against the main pick again when a run draws it.
PICK_FIELDS = ("codegen", "speedup", "reference_ms", "optimized_ms", "ci_low", "ci_high", "noise", "rounds",
               "tolerance", "calibration", "measured_at")
PICKS_KEPT = 8


def same_pick(blessed: Mapping[str, Any] | None, measured: Mapping[str, Any] | None) -> bool:
    """Whether two sets of kernels' facts are one pick: every recorded fact equal (speedgate.codegen.changes). Facts
    missing on either side (a CPU run, an entry blessed before facts were recorded) cannot tell: one pick."""
    return not blessed or not measured or not codegen.changes(blessed, measured)


def pick_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's main pick as one of another entry's `picks`."""
    return {name: entry[name] for name in PICK_FIELDS if entry.get(name) is not None}


def matching(entry: Mapping[str, Any] | None, measured: Mapping[str, Any] | None) -> tuple[int, dict[str, Any]] | None:
    """(index, pick) of the entry's other pick whose kernels are `measured`'s, or None: the main pick matches, the
    facts cannot tell, or this pick was never seen."""
    if not entry or not measured or same_pick(entry.get("codegen"), measured):
        return None
    for index, pick in enumerate(entry.get("picks") or []):
        if isinstance(pick, dict) and pick.get("codegen") and same_pick(pick["codegen"], measured):
            return index, dict(pick)
    return None


def nearest(entry: Mapping[str, Any] | None, measured: Mapping[str, Any] | None) -> tuple[int, dict[str, Any], float, float] | None:
    """(index, pick, the run's kernel time that differs from it, from the main pick) of the entry's other pick nearest
    to kernels that are not the main pick's (codegen.differing: the shares of the run's kernel time its differing
    kernels take), the first of the nearest, where it is nearer than the main pick by at least the entry's tolerance:
    kernels that set two picks apart by less of the time could not move a speedup out of its band, and picks so alike
    (a training step's copies at another grid) differ in speed by the cards that blessed them, not by their kernels.
    None when the kernels are the main pick's, no other pick is so much nearer, the run records no shares, or the
    facts cannot tell."""
    if not entry or not measured or not entry.get("codegen") or same_pick(entry["codegen"], measured):
        return None
    from_main = codegen.differing(entry["codegen"], measured)
    if from_main is None:
        return None
    margin = float(entry.get("tolerance") or 0.0)
    best: tuple[int, dict[str, Any], float, float] | None = None
    for index, pick in enumerate(entry.get("picks") or []):
        if isinstance(pick, dict) and pick.get("codegen"):
            apart = codegen.differing(pick["codegen"], measured)
            if apart is not None and apart <= from_main - margin and (best is None or apart < best[2]):
                best = (index, dict(pick), apart, from_main)
    return best


def judged_entry(entry: Mapping[str, Any] | None, measured: Mapping[str, Any] | None) -> tuple[Mapping[str, Any] | None, str | None]:
    """The entry a run with `measured` kernels is judged against: the entry itself, or, when its kernels are one of
    the entry's other picks (matching) or nearest to one (nearest), that pick's numbers in the entry's place (its
    tolerance and evidence too; an other pick without evidence is judged with the main pick's tolerance), with a
    note naming the pick."""
    found = matching(entry, measured)
    near = nearest(entry, measured) if found is None else None
    if near is not None:
        found = near[:2]
    if entry is None or found is None:
        return entry, None
    index, pick = found
    judged = {k: v for k, v in entry.items() if k not in ("picks", "calibration")}
    judged.update(pick)
    if "calibration" not in pick and "calibration" in entry:
        judged["calibration"] = {k: v for k, v in entry["calibration"].items()
                                 if k in ("runs", "spread", "measured_at")}
        judged["tolerance"] = entry.get("tolerance", pick.get("tolerance"))
    whose = ("its kernels are this run's" if near is None else
             f"the nearest to this run's kernels: those that differ from it take {near[2]:.1%} of the run's kernel "
             f"time, from the main pick {near[3]:.1%}")
    note = (f"judged against the entry's other pick {index + 1} ({whose}; blessed "
            f"{float(pick['speedup']):.3f}x on {str(pick.get('measured_at', ''))[:10]}), not the main pick "
            f"({float(entry['speedup']):.3f}x)")
    return judged, note


def dropped(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The picks (main or other) of an entry as it was that it no longer holds: dropped for room (PICKS_KEPT)."""
    if not before:
        return []
    kept = [after, *((after or {}).get("picks") or [])] if after else []
    held = [before, *(before.get("picks") or [])]
    return [dict(p) for p in held if isinstance(p, Mapping) and p.get("codegen")
            and not any(isinstance(q, Mapping) and q.get("codegen") and same_pick(p["codegen"], q["codegen"])
                        for q in kept)]


def dropped_line(case_id: str, gone: list[dict[str, Any]]) -> str:
    """What a bless or the evidence command says of picks it dropped for room."""
    which = ", ".join(f"{float(p['speedup']):.4g}x of {str(p.get('measured_at', ''))[:10]}" for p in gone)
    return (f"{case_id}: {len(gone)} earlier pick(s) dropped ({which}): an entry keeps its {PICKS_KEPT} latest other "
            "picks; a run that draws one is judged against the main pick")


def after_bless(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> tuple[Mapping[str, Any] | None, list[dict[str, Any]]]:
    """What a bless of `new` takes from `old`: (what old recorded of new's pick: old itself when its main pick is
    that one, the other pick that is, else None; the new entry's other picks: old's, and, when new picked other
    kernels than old's main, old's main last (the newest, as the evidence command appends a pick) and the one that
    is new's main left out; the oldest dropped past PICKS_KEPT)."""
    others = [dict(p) for p in (old or {}).get("picks") or [] if isinstance(p, dict)]
    if old is None:
        return None, others
    if same_pick(old.get("codegen"), new.get("codegen")):
        return old, others
    found = matching(old, new.get("codegen"))
    if found is not None:
        del others[found[0]]
    return (found[1] if found else None), [*others, pick_of(old)][-PICKS_KEPT:]


__all__ = ["PICKS_KEPT", "PICK_FIELDS", "after_bless", "dropped", "dropped_line", "judged_entry", "matching", "nearest",
           "pick_of", "same_pick"]
