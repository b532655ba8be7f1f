"""Where a side's event time goes in the gate's own rounds (reads lab/device/rounds_profile_plugin.py's file; no GPU)

Usage: python -m lab.rounds_profile ROUNDS.jsonl [--optimized _attn_fwd] [--test SUBSTRING]

Each profiled batch: the flush stream's kernels (the hold's spins, the first of them; one flush before every call) cut
the timed stream's kernels into calls. For each call: its event ms (the gate's reading), its kernels' busy time, the
gap from the flush's end to its first kernel (the events start at the flush's end: the timed stream waits for it),
and what ran before it (a call is the optimized side's when one of its kernels' names holds --optimized). Printed
per batch kind (the reference's longest kernel) and per neighbour: the medians of the optimized side's event
ms, busy ms and gap, so that a side slower in its events than in its kernels shows where the difference lies.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def calls_of(line: dict[str, Any], optimized: str) -> list[dict[str, Any]]:
    """The calls of one profiled batch: side ('opt' or 'ref'), the side before it (None for the first), event ms,
    busy ms, gap us (flush end to first kernel), its longest kernel's name (what tells one reference from another:
    several begin alike); [] if the trace does not hold one flush per call."""
    kernels = line["kernels"]
    if not kernels:
        return []
    flush_stream, spin = kernels[0]["stream"], kernels[0]["name"]  # the first: a hold's spin (one per piece of a batch)
    flushes = [k for k in kernels if k["stream"] == flush_stream and k["name"] != spin]
    work = [k for k in kernels if k["stream"] != flush_stream]
    if len(flushes) != line["calls"]:
        return []
    calls: list[dict[str, Any]] = []
    for i, flush in enumerate(flushes):
        begin = flush["start"] + flush["us"]
        end = flushes[i + 1]["start"] if i + 1 < len(flushes) else float("inf")
        mine = [k for k in work if begin <= k["start"] < end]
        if not mine:
            return []
        side = "opt" if any(optimized in k["name"] for k in mine) else "ref"
        calls.append({"side": side, "after": calls[-1]["side"] if calls else None, "event_ms": line["times"][i],
                      "busy_ms": sum(k["us"] for k in mine) / 1e3, "gap_us": mine[0]["start"] - begin,
                      "longest": max(mine, key=lambda k: k["us"])["name"]})
    return calls


def summary(lines: list[dict[str, Any]], optimized: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (the reference's longest kernel, the side before): the optimized side's calls' medians."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in lines:
        calls = calls_of(line, optimized)
        reference = next((c["longest"] for c in calls if c["side"] == "ref"), None)
        if reference is None:
            continue
        for call in calls:
            if call["side"] == "opt" and call["after"]:
                groups.setdefault((reference, call["after"]), []).append(call)
    return {key: {"calls": len(group), **{f: statistics.median(c[f] for c in group) for f in ("event_ms", "busy_ms", "gap_us")}}
            for key, group in groups.items()}


def limits(lessons: list[dict[str, Any]]) -> list[str]:
    """Each limit the timer took from a held batch (rounds_profile_plugin.spy_on_holds' lines), in words: the batch,
    its hold, and the call whose host step set it beside the median step."""
    said = []
    for lesson in lessons:
        if lesson.get("limit") is not None and lesson["steps"]:
            steps = lesson["steps"]
            at = max(range(len(steps)), key=steps.__getitem__)
            said.append(f"a limit of {lesson['limit']:.2f} ms from a batch of {len(steps)} calls behind a "
                        f"{lesson['hold']:.2f} ms hold: call {at} took the host {steps[at]:.2f} ms (the median call "
                        f"{statistics.median(steps):.2f} ms)")
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=Path)
    parser.add_argument("--optimized", default="_attn_fwd")
    parser.add_argument("--test", default="")
    args = parser.parse_args()
    lines = [json.loads(t) for t in args.rounds.read_text().splitlines() if t.strip()]
    lines = [line for line in lines if args.test in (line.get("test") or "")]
    holds = [line for line in lines if "hold" in line]  # the timer's lessons (rounds_profile_plugin.spy_on_holds)
    lines = [line for line in lines if "kernels" in line]
    for said in limits(holds):
        print(said)
    ahead = sum(line["ahead"] for line in lines)
    print(f"{len(lines)} profiled batches, the host ahead in {ahead}")
    for (reference, after), s in sorted(summary(lines, args.optimized).items()):
        print(f"beside {reference[:48]:48} after {after}: {s['calls']:4} calls  events {s['event_ms']:.4f} ms  "
              f"kernels {s['busy_ms']:.4f} ms  gap {s['gap_us']:.1f} us")


if __name__ == "__main__":
    main()
