"""How fast the history's change-point detector finds a step and a creep, and how often it cries wolf on a clean series.

Each timed case of a baseline file (by default the committed H100 one) gives a 60-run history whose noise is the case's
own measured spread between gate runs: the largest of its calibration's in-process spread, its between-process
spread and its blessed interval's half-width / 1.96 (each a measured lower bound on how much a fresh run's speedup
moves). Three series per case and seed: clean, a 3% step down at run 40, and a creep of 0.5% a run from run 20.
Detection is replayed as the gate would see it: after each run, `changes_in` on the runs so far.

    python -m lab.history_study [--seeds 10] [--penalty 4.0] [--noise-estimate rms|mad]
                                [--baseline baselines/nvidia-h100-80gb-hbm3.json]

prints a Markdown table (docs/results/history.md holds the one measured on the CPU dev box).
`--demo DIR` instead writes a generated store (six of the file's cases: a step, a creep, four clean) and its page
and PNGs into DIR: the picture in docs/history.md, of generated numbers, not of measured runs.
`--otava` runs Apache Otava's detector (compute_change_points, its defaults) on clean and 3%-step series of 0.3% and
1% noise, where apache-otava is installed (a venv of its own: it pins numpy and brings 44 packages).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speedgate.history.changes import DEFAULT_DROP, DEFAULT_PENALTY, NOISE_FLOOR, Series, changes_in, noise_of
from speedgate.history.store import Point

RUNS = 60
STEP_RUN, STEP = 40, 0.03     # runs are numbered from 1: runs 40..60 are 3% slower
CREEP_RUN, CREEP = 20, 0.005  # run 20 is 0.5% slower than run 19, run 21 1.0%, ...
NEAR = 3                      # a change found within this many runs of the event's run is the event
BANDS = (0.0, 0.0025, 0.005, 0.01, 0.02, math.inf)
H100 = Path(__file__).resolve().parent.parent / "baselines" / "nvidia-h100-80gb-hbm3.json"


def case_noise(entry: dict) -> float:
    """A fresh gate run's relative spread for this baseline entry (see the module's docstring)."""
    calibration = entry.get("calibration") or {}
    spreads = [calibration.get("spread"), calibration.get("process_spread"),
               (entry.get("noise") or 0.0) / 1.96]
    return max(float(s) for s in spreads if s is not None)


def series(kind: str, speedup: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    runs = np.arange(1, RUNS + 1)
    values = speedup * np.exp(rng.normal(0.0, sigma, RUNS))
    if kind == "step":
        values[runs >= STEP_RUN] *= 1 - STEP
    elif kind == "creep":
        values *= np.where(runs >= CREEP_RUN, (1 - CREEP) ** (runs - CREEP_RUN + 1), 1.0)
    return np.round(values, 4)  # the precision reports keep


def points(values: Sequence[float]) -> list[Point]:
    return [Point(i + 1, None, f"c{i + 1:03d}", None, "case", "study", "h100", "pass", float(v), None, None, None, None,
                  None, None, None, False, {}) for i, v in enumerate(values)]


def mad_noise_of(values: Sequence[float]) -> float:
    """The estimate noise_of replaced: the MAD of consecutive log differences (robust to a step, but on 10-20 runs
    often half the true noise)."""
    diffs = np.diff(np.log(np.asarray(values, dtype=float)))
    if len(diffs) < 2:
        return NOISE_FLOOR
    return max(1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0), NOISE_FLOOR)


ESTIMATES = {"rms": noise_of, "mad": mad_noise_of}
ESTIMATE = ["rms"]  # the one in use (main sets it)


def detect(values: np.ndarray, penalty: float) -> Series:
    return changes_in(points(values), penalty=penalty, noise=ESTIMATES[ESTIMATE[0]](values))


@dataclass
class Outcome:
    found: int | None      # runs at or after the event seen when a downward change near it was first reported
    flagged: int | None    # ... when the history first exits 1 (latest move a drop of at least DEFAULT_DROP)
    early: int             # changes reported before the event, on the full series


def replay(values: np.ndarray, event_run: int, penalty: float) -> Outcome:
    found = flagged = None
    for seen in range(event_run + 1, RUNS + 1):
        s = detect(values[:seen], penalty)
        if found is None and any(c.size < 0 and abs((c.index + 1) - event_run) <= NEAR for c in s.changes):
            found = seen - event_run + 1
        if flagged is None and s.dropped(DEFAULT_DROP):
            flagged = seen - event_run + 1
        if found is not None and flagged is not None:
            break
    full = detect(values, penalty)
    return Outcome(found, flagged, sum((c.index + 1) < event_run - NEAR for c in full.changes))


def clean_outcome(values: np.ndarray, penalty: float) -> tuple[int, bool, bool]:
    """(changes on the full series, whether it exits 1 at run 60, whether any run from 10 on exited 1)."""
    full = detect(values, penalty)
    ever = any(detect(values[:seen], penalty).dropped(DEFAULT_DROP) for seen in range(10, RUNS + 1))
    return len(full.changes), full.dropped(DEFAULT_DROP), ever


def _median(values: list[int | None]) -> str:
    got = sorted(v for v in values if v is not None)
    return "-" if not got else f"{np.median(got):g}"


def _share(values: list[object], predicate=lambda v: v is not None) -> str:
    return f"{sum(1 for v in values if predicate(v)) / len(values):.0%}" if values else "-"


def study(baseline: Path, seeds: int, penalty: float) -> list[str]:
    doc = json.loads(baseline.read_text(encoding="utf-8"))
    cases = sorted((cid, e) for cid, e in doc["cases"].items() if e.get("speedup"))
    rows = []
    for low, high in zip(BANDS, BANDS[1:]):
        band = [(i, cid, e) for i, (cid, e) in enumerate(cases) if low <= case_noise(e) < high]
        if not band:
            continue
        step, creep, clean = [], [], []
        for i, _cid, entry in band:
            sigma = case_noise(entry)
            for seed in range(seeds):
                rng = np.random.default_rng([i, seed])
                step.append(replay(series("step", entry["speedup"], sigma, rng), STEP_RUN, penalty))
                creep.append(replay(series("creep", entry["speedup"], sigma, rng), CREEP_RUN, penalty))
                clean.append(clean_outcome(series("clean", entry["speedup"], sigma, rng), penalty))
        name = f"{low:.2%}-{high:.2%}" if high != math.inf else f">= {low:.2%}"
        rows.append(
            f"| {name} | {len(band)} | {len(step)} "
            f"| {_share([o.found for o in step])} | {_median([o.found for o in step])} "
            f"| {_share([o.flagged for o in step])} | {_median([o.flagged for o in step])} "
            f"| {_share([o.flagged for o in creep])} | {_median([o.flagged for o in creep])} "
            f"| {np.mean([c[0] for c in clean]):.2f} | {_share([c[0] for c in clean], bool)} "
            f"| {_share([c[2] for c in clean], bool)} | {np.mean([o.early for o in step + creep]):.2f} |")
    return [
        f"{len(cases)} cases of {baseline.name}, {seeds} seeds each, penalty {penalty:g} x noise^2 x log(n), "
        f"noise estimate {ESTIMATE[0]}, "
        f"exit 1 on a latest drop >= {DEFAULT_DROP:.0%}",
        "",
        "| noise (rel. SD) | cases | series of each kind | step: change found at run 40 +-3 | step: runs to find it "
        "| step: exit 1 by run 60 | step: runs to exit 1 | creep: exit 1 by run 60 | creep: runs to exit 1 "
        "| clean: changes in 60 runs (mean) | clean: series with any change | clean: series that exit 1 at some run 10-60 "
        "| step and creep: changes before the event (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def demo(baseline: Path, out: Path) -> None:
    """A generated 60-run store of six cases with the file's noise, its page and PNGs (see the docstring)."""
    from speedgate import export
    from speedgate.history.cli import load_series
    from speedgate.history.page import write_page
    from speedgate.history.png import write_pngs
    from speedgate.history.store import record_report
    from speedgate.results import CompareResult
    from speedgate.verdict import Verdict

    doc = json.loads(baseline.read_text(encoding="utf-8"))
    entries = sorted(((cid, e) for cid, e in doc["cases"].items() if e.get("speedup")), key=lambda c: case_noise(c[1]))
    picked = [entries[int(q * (len(entries) - 1))] for q in (0.5, 0.3, 0.1, 0.7, 0.85, 0.95)]
    kinds = ["step", "creep", "clean", "clean", "clean", "clean"]
    rng = np.random.default_rng(2026)
    values = {cid: series(kind, e["speedup"], case_noise(e), rng) for (cid, e), kind in zip(picked, kinds)}
    out.mkdir(parents=True, exist_ok=True)
    db = out / "history.db"
    db.unlink(missing_ok=True)
    for run in range(RUNS):
        records = []
        for cid, e in picked:
            s, tol, noise = float(values[cid][run]), float(e["tolerance"]), float(e.get("noise") or 0.0)
            verdict = Verdict.REGRESSED if s < e["speedup"] * (1 - tol) else Verdict.PASS
            records.append(CompareResult(case_id=cid, nodeid=cid, name=None, hardware_key=doc["hardware_key"], timed=True,
                                         verdict=verdict, note="", tolerance=tol, speedup=s, ci_low=s * (1 - noise),
                                         ci_high=s * (1 + noise), noise=noise, baseline=e["speedup"]))
        report = export.json_report(records, [], set(), settings={}, fingerprints={doc["hardware_key"]: doc["fingerprint"]},
                                    ceilings={}, gpu_state={}, workers={})
        record_report(db, report, source="generated", run_time=f"2026-10-{1 + run // 2:02d}T{12 * (run % 2):02d}:00:00Z",
                      recorded_at="generated", commit=f"{run + 1:03d}".ljust(40, "0"), branch="main")
    found = load_series(db)
    write_page(out / "history.html", found, title="speedgate history: generated (lab/history_study.py --demo)", runs=RUNS)
    write_pngs(out / "png", found)


def otava_probe(seeds: int = 20) -> list[str]:
    """Otava's detection of the 3% step (runs to find it) and its false changes on clean 60-run series."""
    from otava.analysis import compute_change_points

    def found(values: np.ndarray) -> list[int]:
        return [c.index for c in compute_change_points(list(values))[0]]

    lines = []
    rng = np.random.default_rng(0)
    for sigma in (0.003, 0.01):
        delays, false = [], 0
        for _ in range(seeds):
            clean = 1.5 * np.exp(rng.normal(0.0, sigma, RUNS))
            false += len(found(clean))
            step = clean.copy()
            step[STEP_RUN - 1:] *= 1 - STEP
            for seen in range(STEP_RUN + 1, RUNS + 1):
                if any(abs(i - (STEP_RUN - 1)) <= NEAR for i in found(step[:seen])):
                    delays.append(seen - STEP_RUN + 1)
                    break
        lines.append(f"otava, noise {sigma:.1%}: step found in {len(delays)}/{seeds} series, runs to find it (median) "
                     f"{_median(list(delays))}; {false} changes on {seeds} clean series")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=H100)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--penalty", type=float, default=DEFAULT_PENALTY)
    parser.add_argument("--noise-estimate", choices=sorted(ESTIMATES), default="rms")
    parser.add_argument("--demo", type=Path, default=None, metavar="DIR")
    parser.add_argument("--otava", action="store_true")
    args = parser.parse_args(argv)
    if args.otava:
        print("\n".join(otava_probe(args.seeds)))
        return 0
    if args.demo is not None:
        demo(args.baseline, args.demo)
        return 0
    ESTIMATE[0] = args.noise_estimate
    for line in study(args.baseline, args.seeds, args.penalty):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
