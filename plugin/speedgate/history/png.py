"""A PNG per case of the history (matplotlib, the `chart` extra), for terminals and pull-request comments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .changes import Series


def file_name(series: Series) -> str:
    """A file name for the series: its case id and hardware key with anything but [A-Za-z0-9._-] as '_'."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{series.ident}__{series.hardware_key}").strip("_")
    return f"{stem[:180]}.png"


def write_pngs(folder: Path, series: Sequence[Series]) -> list[Path]:
    """One PNG per series in folder: speedup over runs with its 95% intervals, the blessed value and its tolerance
    band, change points as vertical lines labelled with their size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("the PNGs need matplotlib: pip install matplotlib (speedgate's `chart` extra; in a clone of "
                           "speedgate: pip install -e '.[chart]')") from exc
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for s in series:
        xs = list(range(len(s.points)))
        fig, ax = plt.subplots(figsize=(6.4, 2.6), constrained_layout=True)
        for i, p in enumerate(s.points):
            if p.baseline is not None and p.tolerance is not None:
                ax.fill_between([i - 0.5, i + 0.5], p.baseline * (1 - p.tolerance), p.baseline * (1 + p.tolerance),
                                color="#e3e3e3", lw=0)
        blessed = [(i, p.baseline) for i, p in enumerate(s.points) if p.baseline is not None]
        if blessed:
            ax.plot([b[0] for b in blessed], [b[1] for b in blessed], ls="--", color="#888", lw=1, label="blessed")
        speedups = [float(p.speedup or 0.0) for p in s.points]
        lows = [p.speedup - p.ci_low if p.ci_low is not None and p.speedup is not None else 0.0 for p in s.points]
        highs = [p.ci_high - p.speedup if p.ci_high is not None and p.speedup is not None else 0.0 for p in s.points]
        ax.errorbar(xs, speedups, yerr=[lows, highs], fmt="o-", ms=3, lw=0.8, color="#1f77b4", elinewidth=0.6,
                    label="speedup (95% interval)")
        for c in s.changes:
            ax.axvline(c.index - 0.5, color="#ff7f0e", lw=1.5)
            ax.annotate(f"{c.size:+.1%}", (c.index - 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                        textcoords="offset points", fontsize=8, color="#b35400")
        ticks = xs[:: max(1, len(xs) // 8)]
        ax.set_xticks(ticks, [str(s.points[i].run_id) for i in ticks], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlabel("run", fontsize=8)
        ax.set_ylabel("speedup", fontsize=8)
        move = f", latest move {s.latest_move:+.1%}" if s.latest_move is not None else ""
        ax.set_title(f"{s.ident} [{s.hardware_key}]{move}", fontsize=8, loc="left")
        ax.grid(lw=0.3)
        path = folder / file_name(s)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
