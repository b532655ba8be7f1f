"""The run in words: the header, the case and metric tables, notes, and the Markdown summary, from typed results."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from .advice import create_file_hint
from .hardware import software_drift
from .reporting import RunView, write_text
from .results import CompareResult, MetricResult
from .tolerance import WIDE_TOLERANCE
from .verdict import Verdict, by_severity, percent

COLUMNS = ("case", "ref ms", "opt ms", "speedup", "95% CI", "baseline", "change", "detects", "rate", "% peak", "checked on",
           "verdict")
# How each verdict's correctness was established (CompareResult.established), in the table's words.
ESTABLISHED = {"fresh inputs": "fresh inputs", "fixed inputs": "fixed inputs", "unchecked": "-", "caller": "by the case"}
METRIC_COLUMNS = ("metric", "value", "baseline", "change", "tolerance", "better", "verdict")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _rate(r: CompareResult) -> str:
    if r.achieved_tflops is not None:
        return f"{r.achieved_tflops:.1f} TFLOP/s"
    if r.achieved_gbps is not None:
        return f"{r.achieved_gbps:.0f} GB/s"
    return "-"


def verdict_text(verdict: Verdict, failed_test: bool, remeasured: bool = False, unchecked: bool = False) -> str:
    text = verdict.value
    if failed_test and verdict != Verdict.REGRESSED:
        text += " (test failed)"
    if remeasured:
        text += ", re-measured"
    if unchecked:
        text += ", unchecked"  # check=False: a speedup of outputs nobody compared
    return text


def row(r: CompareResult, failed_test: bool) -> tuple[str, ...]:
    timed = r.timed and r.speedup is not None
    return (
        r.case_id,
        _ms(r.reference_ms),
        _ms(r.optimized_ms),
        f"{r.speedup:.3f}x" if timed else "-",
        f"{r.ci_low:.3f}-{r.ci_high:.3f}" if timed and r.ci_low is not None and r.ci_high is not None else "-",
        f"{r.baseline:.3f}x" if r.baseline else "-",
        f"{r.change:+.1%}" if r.change is not None else "-",
        f">={r.detectable_drop:.1%}" if r.detectable_drop is not None else "-",
        _rate(r) if timed else "-",
        f"{r.peak_fraction:.0%} {(r.bound or '')[:3]}" if r.peak_fraction is not None else "-",
        ESTABLISHED.get(r.established, "-"),
        verdict_text(r.verdict, failed_test, r.remeasured, r.unchecked),
    )


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


def table(records: Sequence[CompareResult], failed_nodeids: Collection[str]) -> list[str]:
    """Aligned text table, regressions first, then the rest in the order they ran."""
    return align([COLUMNS] + [row(r, r.nodeid in failed_nodeids) for r in by_severity(records)])


def notes(records: Sequence[CompareResult]) -> list[str]:
    """The non-empty notes of cases that are not plain passes, one line each; then the checks each case waived,
    with its reason."""
    lines = [f"{r.case_id}: {r.note}" for r in records if r.note and r.verdict != Verdict.UNTIMED]
    lines += [f"{r.case_id}: waived {name}: {reason}" for r in records for name, reason in sorted((r.waived or {}).items())]
    return lines


def by_test(records: Sequence[CompareResult]) -> list[str]:
    """One line per test that compared several named pairs: each pair's speedup side by side.

    For a kernel gated against eager, a vendor library and the compiler, this is the three ratios in a row.
    """
    groups: dict[str, list[CompareResult]] = {}
    for r in records:
        if r.timed and r.name:
            groups.setdefault(r.nodeid, []).append(r)
    rows = [(nodeid, group) for nodeid, group in groups.items() if len(group) > 1]
    if not rows:
        return []
    width = max(len(nodeid) for nodeid, _ in rows)
    lines = ["speedup of the optimized side against each reference, per test:"]
    for nodeid, group in rows:
        cells = "  ".join(f"{r.name} {r.speedup:.3f}x" for r in group)
        lines.append(f"{nodeid.ljust(width)}  {cells}")
    return lines


def metric_row(m: MetricResult, failed_test: bool) -> tuple[str, ...]:
    unit = f" {m.unit}" if m.unit else ""
    return (
        m.metric_id, f"{m.value:.4g}{unit}",
        f"{m.baseline:.4g}{unit}" if m.baseline is not None else "-",
        f"{m.change:+.1%}" if m.change is not None and m.change != float("inf") else "-",
        f"{m.tolerance:.0%}", m.direction, verdict_text(m.verdict, failed_test),
    )


def metrics_table(metrics: Sequence[MetricResult], failed_nodeids: Collection[str]) -> list[str]:
    """Single-valued metrics (compile seconds, recompiles, graph breaks, memory), regressions first."""
    if not metrics:
        return []
    rows = [METRIC_COLUMNS] + [metric_row(m, m.nodeid in failed_nodeids) for m in by_severity(metrics)]
    return align(rows) + [f"{m.metric_id}: {m.note}" for m in metrics if m.note]


def tally(results: Sequence[CompareResult | MetricResult]) -> str:
    counts: dict[Verdict, int] = {}
    for r in by_severity(results):
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return ", ".join(f"{n} {verdict.value}" for verdict, n in counts.items()) or "none"


def markdown(
    records: Sequence[CompareResult], metrics: Sequence[MetricResult], failed_nodeids: Collection[str],
    header: Sequence[str] = (),
) -> str:
    """The terminal tables as GitHub-flavoured Markdown, regressions first, with a tally on top."""
    lines = ["## speedgate", "", f"**{len(records)} cases: {tally(records)}**"]
    if metrics:
        lines += ["", f"**{len(metrics)} metrics: {tally(metrics)}**"]
    lines.append("")
    lines += [f"- {line.strip()}" for line in header]
    if header:
        lines.append("")
    if records:
        lines += _md_table(COLUMNS, [(row(r, r.nodeid in failed_nodeids), r.verdict) for r in by_severity(records)])
    if metrics:
        lines += [""] + _md_table(METRIC_COLUMNS, [(metric_row(m, m.nodeid in failed_nodeids), m.verdict)
                                                    for m in by_severity(metrics)])
    notes_ = notes(records) + [f"{m.metric_id}: {m.note}" for m in metrics if m.note]
    power = detection_line(records)
    notes_ += [power] if power else []
    if notes_:
        lines += ["", *[f"- {n}" for n in notes_]]
    return "\n".join(lines) + "\n"


def _md_table(columns: Sequence[str], rows: Sequence[tuple[Sequence[str], Verdict]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |",
             "| " + " | ".join(["---"] + ["---:"] * (len(columns) - 2) + ["---"]) + " |"]
    for cells_, verdict in rows:
        cells = list(cells_)
        cells[0] = f"`{cells[0]}`"
        if verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE):
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def header(
    keys: Sequence[str],
    *,
    docs: Mapping[str, dict[str, Any] | None],
    errors: Mapping[str, str],
    paths: Mapping[str, Any],
    updating: bool,
    gpu_state: Mapping[str, str],
    ceilings: Mapping[str, dict[str, Any]],
    fingerprints: Mapping[str, dict[str, Any]],
    workers: Mapping[str, dict[str, Any]],
    timed: bool = True,
    lost_workers: Sequence[str] = (),
) -> list[str]:
    """Hardware key, baseline file state and software drift, for the top of the summary; from documents the
    session already read and validated (errors: the keys whose file could not be used, and why; timed: whether the
    run timed anything, which the hint for a missing file follows; lost_workers: xdist workers whose results never
    came, named beside those that reported where they ran)."""
    lines = []
    for key in keys:
        if key in errors:
            lines.append(f"hardware key {key}: {errors[key]}")
            continue
        doc = docs.get(key)
        if doc is None:
            state = "not found" + ("" if updating else f" ({create_file_hint(timed)})")
        else:
            state = f"found, {len(doc['cases'])} cases"
        lines.append(f"hardware key {key}; baseline {paths[key]}: {state}")
        if key in gpu_state:
            lines.append(f"  GPU state when timing began: {gpu_state[key]}")
        seen = ceilings.get(key)
        if seen:
            rates = ", ".join(f"{d} matmul {r:.0f} TFLOP/s" for d, r in sorted(seen["matmul_tflops"].items()))
            lines.append(f"  ceilings measured in this run: copy {seen['copy_gbps']:.0f} GB/s" + (f", {rates}" if rates else ""))
        current = fingerprints.get(key)
        if doc is not None and current is not None:
            drift = software_drift(doc["fingerprint"].get("software", {}), current.get("software", {}))
            if drift:
                lines.append(f"  software drift since the baseline: {', '.join(drift)}")
    by_id = lambda wid: (len(wid), wid)  # noqa: E731  # gw2 before gw10
    places = [f"{wid} on {'the CPU' if workers[wid]['device'] == 'cpu' else 'GPU ' + workers[wid]['device']}"
              for wid in sorted(workers, key=by_id)]
    places += [f"{wid} lost (its closing report never came)"
               for wid in sorted(set(lost_workers) - set(workers), key=by_id)]
    if places:
        shared = any(w["shared"] for w in workers.values())
        lines.append(f"xdist workers: {', '.join(places)}"
                     + ("; devices shared, so tests took turns on each" if shared else ""))
    return lines


def detection_line(records: Sequence[CompareResult]) -> str | None:
    """The spread across the run of the smallest regression each timed case can catch."""
    from .attribution import detection_summary

    return detection_summary({r.case_id: r.detectable_drop for r in records if r.detectable_drop is not None})


def budget_line(records: Sequence[CompareResult]) -> str | None:
    """How the timed comparisons' rounds spent their wall time: timed work, the stopping checks' statistics, and
    host overhead (launches, L2 flushes, event reads)."""
    budgets = [r.budget for r in records if r.budget]
    if not budgets:
        return None
    total = sum(b["seconds"] for b in budgets)
    if total <= 0:
        return None
    parts = {name: sum(b[key] for b in budgets) / total for name, key in
             (("timed work", "timed_s"), ("statistics", "stats_s"), ("host overhead", "other_s"))}
    return (f"rounds of {len(budgets)} comparisons took {total:.1f} s: "
            + ", ".join(f"{share:.0%} {name}" for name, share in parts.items()))


OWN_WORK_SHOWN = 3  # the tests named in the own-work line


def own_work_line(records: Sequence[CompareResult], test_seconds: Mapping[str, float]) -> str | None:
    """What the tests using perf spent outside speedgate's comparisons (their setup, compiles, fresh processes,
    inputs): each test's pytest durations less its comparisons' stages, and the tests that spent the most."""
    if not test_seconds:
        return None
    compared: dict[str, float] = {}
    for r in records:
        if r.budget and "first_calls_s" in r.budget:
            compared[r.nodeid] = compared.get(r.nodeid, 0.0) + sum(r.budget.get(key, 0.0) for _, key in STAGES)
    own = {nodeid: max(seconds - compared.get(nodeid, 0.0), 0.0) for nodeid, seconds in test_seconds.items()}
    total = sum(test_seconds.values())
    most = sorted(own.items(), key=lambda item: -item[1])[:OWN_WORK_SHOWN]
    return (f"{len(test_seconds)} tests using perf took {total:.1f} s: comparisons {sum(compared.values()):.1f} s, "
            f"the tests' own work {sum(own.values()):.1f} s (building inputs, compiling, fresh processes; the most: "
            + ", ".join(f"{nodeid.rpartition('/')[2]} {seconds:.1f} s" for nodeid, seconds in most) + ")")


def _summary_markdown(run: RunView) -> str:
    notes_ = [*run.header, *(f"warning: {w}" for w in run.warnings), *(f"error: {e}" for e in run.errors)]
    return markdown(run.records, run.metrics, run.failed_nodeids, notes_)


class MarkdownReport:
    """--speedgate-markdown: the summary table as Markdown, when the run has results."""

    def path(self, run: RunView, asked: Path | None) -> Path | None:
        return asked if run.has_results else None

    def write(self, run: RunView, path: Path) -> None:
        write_text(path, _summary_markdown(run))


class StepSummary:
    """The same Markdown appended to $GITHUB_STEP_SUMMARY whenever that is set (GitHub Actions)."""

    def path(self, run: RunView, asked: Path | None) -> Path | None:
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        return Path(summary) if summary and run.has_results else None

    def write(self, run: RunView, path: Path) -> None:
        write_text(path, _summary_markdown(run), append=True)


STAGES = (("first calls (compile, autotune)", "first_calls_s"), ("output checks", "checks_s"),
          ("warm-up and rounds", "warm_up_rounds_s"), ("audits (profiler, ceilings, re-check)", "audit_s"),
          ("judging (re-measure, calibration)", "judge_s"))


def stages_line(records: Sequence[CompareResult]) -> str | None:
    """Where the comparisons' time went, stage by stage (compile and autotuning are the first calls)."""
    budgets = [r.budget for r in records if r.budget and "first_calls_s" in r.budget]
    if not budgets:
        return None
    totals = {key: sum(b.get(key, 0.0) for b in budgets) for _, key in STAGES}
    total = sum(totals.values())
    return (f"{len(budgets)} comparisons took {total:.1f} s: "
            + ", ".join(f"{name} {totals[key]:.1f} s" for name, key in STAGES))




def wide_tolerances(records: Sequence[CompareResult]) -> list[str]:
    """A line for each timed case whose tolerance is over WIDE_TOLERANCE: where it came from, and the smallest drop
    it still catches at this run's noise."""
    lines = []
    for r in records:
        if not r.timed or r.tolerance <= WIDE_TOLERANCE:
            continue
        why = {"case": "pinned by the case (its reason is in a comment beside its compare())",
               "calibrated": f"calibrated, set by {r.tolerance_cause}" if r.tolerance_cause else
                             "calibrated: the spread of its speedup between runs, processes and cards",
               "configured": "the run's configured default", "default": "the default of its hardware key"}.get(
            r.tolerance_source, "its entry's")
        catches = (f"catches a drop of {r.detectable_drop:.1%} or more from this run's reading"
                   if r.detectable_drop is not None else "")
        lines.append(f"{r.case_id}: tolerance {percent(r.tolerance)}, {why}; {catches}".rstrip("; "))
    return lines
