"""The summary table of every case, as plain text lines."""

from __future__ import annotations

from typing import Any, Sequence

from .verdict import SEVERITY, Verdict

COLUMNS = ("case", "ref ms", "opt ms", "speedup", "95% CI", "baseline", "change", "rate", "% peak", "verdict")


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def _rate(record: dict[str, Any]) -> str:
    if record.get("achieved_tflops") is not None:
        return f"{record['achieved_tflops']:.1f} TFLOP/s"
    if record.get("achieved_gbps") is not None:
        return f"{record['achieved_gbps']:.0f} GB/s"
    return "-"


def row(record: dict[str, Any], failed_test: bool) -> tuple[str, ...]:
    timed = record["timed"]
    verdict = record["verdict"]
    if failed_test and verdict != Verdict.REGRESSED.value:
        verdict += " (test failed)"
    if record.get("remeasured"):
        verdict += ", re-measured"
    return (
        record["case_id"],
        _ms(record.get("reference_ms")),
        _ms(record.get("optimized_ms")),
        f"{record['speedup']:.3f}x" if timed else "-",
        f"{record['ci_low']:.3f}-{record['ci_high']:.3f}" if timed else "-",
        f"{record['baseline']:.3f}x" if record.get("baseline") else "-",
        f"{record['change']:+.1%}" if record.get("change") is not None else "-",
        _rate(record) if timed else "-",
        f"{record['peak_fraction']:.0%} {record['bound'][:3]}" if record.get("peak_fraction") is not None else "-",
        verdict,
    )


def ordered(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Regressions first, then improvements, new cases, passes; in run order within each."""
    ranked = sorted(enumerate(records), key=lambda ir: (SEVERITY.get(Verdict(ir[1]["verdict"]), 9), ir[0]))
    return [record for _, record in ranked]


def align(rows: Sequence[Sequence[str]]) -> list[str]:
    """A text table: the first row is the header, underlined; first column left-aligned, the last free, the rest
    right-aligned (numbers)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, cells in enumerate(rows):
        parts = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:-1], widths[1:-1])] + [cells[-1]]
        lines.append("  ".join(parts).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def table(records: Sequence[dict[str, Any]], failed_nodeids: set[str]) -> list[str]:
    """Aligned text table, regressions first, then the rest in the order they ran."""
    return align([COLUMNS] + [row(r, r["nodeid"] in failed_nodeids) for r in ordered(records)])


def notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """The non-empty notes of cases that are not plain passes, one line each."""
    out = []
    for record in records:
        if record["note"] and record["verdict"] != Verdict.UNTIMED.value:
            out.append(f"{record['case_id']}: {record['note']}")
    return out


def by_test(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per test that compared several named pairs: each pair's speedup side by side.

    For a kernel gated against eager, a vendor library and the compiler, this is the three ratios in a row.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["timed"] and record.get("name"):
            groups.setdefault(record["nodeid"], []).append(record)
    rows = [(nodeid, group) for nodeid, group in groups.items() if len(group) > 1]
    if not rows:
        return []
    width = max(len(nodeid) for nodeid, _ in rows)
    lines = ["speedup of the optimized side against each reference, per test:"]
    for nodeid, group in rows:
        cells = "  ".join(f"{r['name']} {r['speedup']:.3f}x" for r in group)
        lines.append(f"{nodeid.ljust(width)}  {cells}")
    return lines


def markdown(records: Sequence[dict[str, Any]], failed_nodeids: set[str], header: Sequence[str] = ()) -> str:
    """The terminal table as GitHub-flavoured Markdown, regressions first, with a one-line tally on top."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record["verdict"]] = counts.get(record["verdict"], 0) + 1
    tally = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda kv: SEVERITY.get(Verdict(kv[0]), 9)))
    lines = ["## speedgate", "", f"**{len(records)} cases: {tally or 'none'}**", ""]
    lines += [f"- {line.strip()}" for line in header]
    if header:
        lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("| " + " | ".join(["---"] + ["---:"] * (len(COLUMNS) - 2) + ["---"]) + " |")
    for record in ordered(records):
        cells = list(row(record, record["nodeid"] in failed_nodeids))
        cells[0] = f"`{cells[0]}`"
        if record["verdict"] == Verdict.REGRESSED.value:
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    notes_ = notes(records)
    if notes_:
        lines += ["", *[f"- {n}" for n in notes_]]
    return "\n".join(lines) + "\n"


JUNIT_FIELDS = ("speedup", "reference_ms", "optimized_ms", "ci_low", "ci_high", "baseline", "change", "peak_fraction", "verdict")


def junit_properties(results: Sequence[Any]) -> list[tuple[str, Any]]:
    """('speedgate.<pair>.<metric>', value) for each result of a test; <pair> is its name=, or 'case'."""
    props = []
    for result in results:
        record = result.to_json()
        for field in JUNIT_FIELDS:
            value = record.get(field)
            if value is not None:
                props.append((f"speedgate.{record['name'] or 'case'}.{field}", value))
    return props


GATE_FIELDS = ("case_id", "speedup", "ci_low", "ci_high", "noise", "baseline", "change", "tolerance", "verdict",
               "peak_fraction", "achieved_tflops", "achieved_gbps", "config")


def benchmark_json(records: Sequence[dict[str, Any]], fingerprints: dict[str, Any], machine_info: dict[str, Any],
                   commit_info: dict[str, Any], version: str, now: str) -> dict[str, Any]:
    """pytest-benchmark's JSON layout: two benchmarks per timed case (reference, optimized) in one group.

    Each benchmark's extra_info carries the gate's fields, so tools that read pytest-benchmark files see the
    speedup and verdict beside the times.
    """
    benchmarks = []
    for record in records:
        if not record["timed"] or not record.get("reference_stats"):
            continue
        gate = {k: record.get(k) for k in GATE_FIELDS}
        for side in ("reference", "optimized"):
            benchmarks.append({
                "group": record["case_id"],
                "name": f"{record['case_id'].rpartition('/')[2]}[{side}]",
                "fullname": f"{record['case_id']}[{side}]",
                "params": {"side": side},
                "param": side,
                "extra_info": {**gate, "side": side, "first_call_ms": record.get(f"{side}_first_ms")},
                "options": {"timer": record.get("timer"), "speedgate": True},
                "stats": record[f"{side}_stats"],
            })
    return {
        "machine_info": {**machine_info, "speedgate_fingerprints": fingerprints},
        "commit_info": commit_info,
        "benchmarks": benchmarks,
        "datetime": now,
        "version": version,
    }


METRIC_COLUMNS = ("metric", "value", "baseline", "change", "tolerance", "better", "verdict")


def metrics_table(metrics: Sequence[dict[str, Any]], failed_nodeids: set[str]) -> list[str]:
    """Single-valued metrics (compile seconds, recompiles, graph breaks, memory), regressions first."""
    if not metrics:
        return []
    ranked = sorted(enumerate(metrics), key=lambda im: (SEVERITY.get(Verdict(im[1]["verdict"]), 9), im[0]))
    rows = [METRIC_COLUMNS]
    for _, m in ranked:
        unit = f" {m['unit']}" if m.get("unit") else ""
        verdict = m["verdict"] + (" (test failed)" if m["nodeid"] in failed_nodeids and m["verdict"] != "regressed" else "")
        rows.append((
            m["metric_id"], f"{m['value']:.4g}{unit}",
            f"{m['baseline']:.4g}{unit}" if m.get("baseline") is not None else "-",
            f"{m['change']:+.1%}" if m.get("change") is not None and m["change"] != float("inf") else "-",
            f"{m['tolerance']:.0%}", m["direction"], verdict,
        ))
    notes_ = [f"{m['metric_id']}: {m['note']}" for m in metrics if m["note"]]
    return align(rows) + notes_
