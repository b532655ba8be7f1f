"""A PNG of a run (matplotlib, only when asked for): speedup against baseline with the tolerance band, and % of peak."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .reporting import ReportError, RunView
from .results import CompareResult, MetricResult
from .verdict import Verdict, by_severity

COLOURS = {
    Verdict.REGRESSED: "#d62728",
    Verdict.INCONCLUSIVE: "#ff7f0e",
    Verdict.PICK_CHANGED: "#9467bd",
    Verdict.IMPROVED: "#2ca02c",
    Verdict.PASS: "#1f77b4",
    Verdict.NEW: "#7f7f7f",
    Verdict.NO_BASELINE_FILE: "#7f7f7f",
}


def _label(case_id: str) -> str:
    return case_id.removeprefix("perftests/").replace(".py::", " :: ").replace("test_triton_", "")


def _metric_goodness(m: MetricResult) -> tuple[float, float, float] | None:
    """(value against baseline, band low, band high) with > 1 better whatever the direction; None without a
    baseline."""
    if not m.baseline or not m.value:
        return None
    t = m.tolerance
    if m.direction == "lower":
        return m.baseline / m.value, 1 / (1 + t), (1 / (1 - t) if t < 1 else 2.0)
    return m.value / m.baseline, 1 - t, 1 + t


def render(records: Sequence[CompareResult], path: Path, title: str, metrics: Sequence[MetricResult] = ()) -> list[str]:
    """Two panels sharing one row per timed case and per metric, regressions on top.

    Left: measured speedup over its baseline (1.0 = as blessed), with the 95% interval and the case's tolerance
    band; new cases sit at 1.0 in grey. Metrics (diamonds) show how much better than blessed they are (baseline /
    value when lower is better), with their tolerance band. Right: the optimized side's fraction of the roofline
    floor (GPU runs). Returns the rows' labels, bottom to top.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("the chart needs matplotlib: pip install 'pytest-speedgate[chart]'") from exc

    # Regressions on top: matplotlib draws the first row at the bottom.
    timed = list(reversed(by_severity(sorted((r for r in records if r.timed), key=lambda r: r.case_id))))
    metric_rows = list(reversed(by_severity(sorted(metrics, key=lambda m: m.metric_id))))
    n = max(len(timed) + len(metric_rows), 1)
    fig, (ax, ax_peak) = plt.subplots(
        1, 2, figsize=(14, 1.5 + 0.22 * n), sharey=True, gridspec_kw={"width_ratios": [3, 1]}, constrained_layout=True
    )
    ys = range(len(timed))
    for y, r in zip(ys, timed):
        colour = COLOURS.get(r.verdict, "#7f7f7f")
        if r.baseline and r.speedup is not None and r.ci_low is not None and r.ci_high is not None:
            rel, lo, hi = r.speedup / r.baseline, r.ci_low / r.baseline, r.ci_high / r.baseline
            tol = r.tolerance
            ax.add_patch(plt.Rectangle((1 - tol, y - 0.4), 2 * tol, 0.8, color="#dddddd", zorder=0, lw=0))
            ax.errorbar(rel, y, xerr=[[rel - lo], [hi - rel]], fmt="o", color=colour, ms=4, capsize=2)
        else:
            ax.plot(1.0, y, marker="s", color=colour, ms=4)
        if r.peak_fraction is not None:
            ax_peak.barh(y, r.peak_fraction, color="#9467bd" if r.bound == "compute" else "#17becf", height=0.7)
    for y, m in zip(range(len(timed), len(timed) + len(metric_rows)), metric_rows):
        colour = COLOURS.get(m.verdict, "#7f7f7f")
        goodness = _metric_goodness(m)
        if goodness is None:
            ax.plot(1.0, y, marker="s", color=colour, ms=4)
            continue
        rel, low, high = goodness
        ax.add_patch(plt.Rectangle((low, y - 0.4), high - low, 0.8, color="#dddddd", zorder=0, lw=0))
        ax.plot(rel, y, marker="D", color=colour, ms=4)
    ax.axvline(1.0, color="black", lw=0.8)
    labels = [_label(r.case_id) for r in timed] + [f"metric: {_label(m.metric_id)}" for m in metric_rows]
    ax.set_yticks(list(range(len(labels))), labels, fontsize=7)
    ax.set_xlabel("measured speedup / baseline speedup (metrics, diamonds: how much better than blessed)\n"
                  "grey band: tolerance; bars: 95% interval", fontsize=8)
    ax.set_title(title, fontsize=10, loc="left")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=v.value) for v, c in COLOURS.items()
               if v != Verdict.NO_BASELINE_FILE]
    ax.legend(handles=handles, loc="lower right", fontsize=7)
    ax.grid(axis="x", lw=0.3)
    ax_peak.set_xlim(0, 1.05)
    ax_peak.set_xlabel("% of peak:\nmemory (cyan), compute (purple)", fontsize=8)
    ax_peak.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax_peak.grid(axis="x", lw=0.3)
    if not labels:
        ax.text(0.5, 0.5, "no timed cases", transform=ax.transAxes, ha="center")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return labels


class ChartReport:
    """--speedgate-chart: the run as a PNG (needs matplotlib), when it has results."""

    def path(self, run: RunView, asked: Path | None) -> Path | None:
        return asked if run.has_results else None

    def write(self, run: RunView, path: Path) -> None:
        title = f"speedgate: {', '.join(run.result_keys)}, {len(run.records)} cases, {len(run.metrics)} metrics"
        try:
            render(run.records, path, title, run.metrics)
        except RuntimeError as exc:
            raise ReportError(str(exc)) from None
