"""How sensitive is the gate, and how often does it cry wolf? Bless with calibration, gate clean runs, gate runs with
a known slowdown injected into the optimized side, and count (GPU).

Usage: python tools/gate_study.py OUT [--calibrate 5] [--processes 2] [--runs 5] [--slowdowns 0.02,0.05,0.10] [--repeat 2]
                                      [--cases NODEID ...] [-- extra pytest args]

Every run is a fresh `python -m pytest` process on the cases (default: a representative subset, CASES), against a
baseline folder of its own (OUT/baselines: the repository's files are never touched):
1. bless:  --update-baselines --speedgate-calibrate N, in --processes fresh processes one after the other (per-case
           tolerance max(floor, k x the wider of the in-process and the between-process spread), blessing.py);
2. clean:  --runs gate runs of unchanged code: every regressed or improved verdict is a false alarm;
3. slowed: --repeat gate runs per slowdown s, each optimized side made slower by s of its own time: before every call
   it queues a spin kernel (torch.cuda._sleep) on the timed stream and keeps the host busy as long, sized from the
   side's own event-timed median (measured on its first call) and the spin's device time read then. A regressed
   verdict is a detection.
Each run's JSON report is kept (OUT/<run>.json) and a run whose report exists is not run again, so a study cut off
by a time limit goes on where it stopped when started again with the same OUT. The table (OUT/study.md, printed) gives per case its calibrated
tolerance, the drop it can detect, false alarms over clean runs, and per slowdown the detections and the speedup's
measured median change.

The slowdown is injected by speedgate.injection's plugin (`-p speedgate.injection`, environment variable
SPEEDGATE_STUDY_SLOWDOWN), which wraps the optimized callable given to perf.compare; each process is run by
speedgate.study.run_pytest. It changes nothing else. For a
study of a selection against the files it has (no bless), `python -m speedgate study` is the command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from speedgate import study
from speedgate.injection import pytest_configure as study_plugin_configure

ROOT = Path(__file__).resolve().parents[1]

# One case or two of each family whose sides are plain callables (the slowdown wraps the optimized one): element-wise,
# row-wise, matmul bf16 and fp8 (Triton, Gluon, CUTLASS), attention (short and long, causal and full; Triton, Gluon),
# the fused MLP, the L2 hints, a compile mode, FlexAttention, a custom op. Left out: the ladder (graph replay: a spin
# kernel in the captured graph is not what the slowdown sizes), the latency=True cases (graph breaks, regional,
# dynamic shapes, training: their time is host work from an idle device, which a spin kernel does not slow as it
# slows device time) and the all-reduce cases (compare_samples: no callable to wrap).
CASES = [
    "perftests/test_triton_elementwise.py::test_add_relu_scale",
    "perftests/test_triton_rowwise.py::test_softmax",
    "perftests/test_triton_matmul.py::test_matmul[tma_persistent-4096-bfloat16]",
    "perftests/test_triton_matmul.py::test_fp8_matmul[tma_persistent-4096]",
    "perftests/test_triton_matmul.py::test_fp8_matmul_gluon[4096]",
    "perftests/test_cutlass_matmul.py::test_cutlass_matmul[4096]",
    "perftests/test_triton_attention.py::test_flash_attention[2048-64-causal]",
    "perftests/test_triton_attention.py::test_flash_attention[8192-128-full]",
    "perftests/test_triton_attention.py::test_flash_attention_gluon[2048-128-causal]",
    "perftests/test_triton_mlp.py::test_fused_mlp_block",
    "perftests/test_triton_l2.py::test_l2_eviction_hints[16]",
    "perftests/test_compile_modes.py::test_compile_mode[default]",
    "perftests/test_compile_flex.py::test_flex_attention[causal]",
    "perftests/test_compile_custom_op.py::test_triton_kernel_in_compiled_model[triton_op]",
]


# ---------------------------------------------------------------- the plugin side: speedgate.injection's
# (`-p tools.gate_study` still loads it, as lab/device/blind_study.sh does)
pytest_configure = study_plugin_configure


# ---------------------------------------------------------------- the study: runs and the table

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def cache_env(out: Path, label: str, fresh_caches: bool) -> dict[str, str]:
    """The environment of one study process: with fresh_caches empty compile caches of its own, as a fresh CI runner
    starts (speedgate.study.run_pytest adds the injected slowdown, or none). A warm inductor cache hands every later
    process the first one's autotuning picks (a torch.compile'd reference's kernel), so calibrating processes would
    all see one mode of a pair that has two (README, "calibrated"), and gate runs would not draw theirs."""
    env = {**os.environ}
    if fresh_caches:
        for variable in CACHE_VARIABLES:
            path = out / "caches" / label / variable.split("_")[0].lower()
            path.mkdir(parents=True, exist_ok=True)
            env[variable] = str(path)
    return env


def run_pytest(out: Path, label: str, cases: list[str], extra: list[str], *, bless: int | None = None,
               slowdown: float | None = None, fresh_caches: bool = True) -> dict[str, Any]:
    """One process of the study on its own baseline folder (resumable: a study split across calls of a time-limited
    machine picks up where it was; an interrupted or failed run is set aside and runs again)."""
    args = [*cases, "--baseline-dir", str(out / "baselines"), *extra]
    if bless:
        args += ["--update-baselines", "--speedgate-calibrate", str(bless)]
    return study.run_pytest(out, label, args, slowdown=slowdown, cwd=ROOT, env=cache_env(out, label, fresh_caches))


def timed_cases(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["case_id"]: c for c in report["cases"] if c.get("timed")}


def blessed_entries(folder: Path, report: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries the gate runs were judged against (their calibrated tolerances), for the cases the report timed:
    each case's from the file of the hardware key it ran on, as the plugin picks it (a folder holds every kind's)."""
    docs = {}
    for f in sorted(folder.glob("*.json")):
        doc = json.loads(f.read_text())
        docs[doc.get("hardware_key", f.stem)] = doc.get("cases", {})
    found = []
    for case in report["cases"]:
        entry = docs.get(case.get("hardware_key"), {}).get(case["case_id"])
        if case.get("timed") and entry is not None:
            found.append({**entry, "case_id": case["case_id"], "timed": True})
    return found


def table(bless: dict[str, Any], clean: list[dict[str, Any]], slowed_runs: dict[float, list[dict[str, Any]]]) -> str:
    blessed = timed_cases(bless)
    shares = sorted(slowed_runs)
    head = ["case", "tolerance", "spread", "detects", "false alarms"]
    head += [f"+{s:.0%}: caught, median change" for s in shares]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    alarms = trials = 0
    caught = {s: [0, 0] for s in shares}
    for case_id, entry in blessed.items():
        short = case_id.split("::", 1)[1] if "::" in case_id else case_id
        runs = [timed_cases(r).get(case_id) for r in clean]
        runs = [r for r in runs if r]
        wrong = sum(r["verdict"] in ("regressed", "improved") for r in runs)
        alarms += wrong
        trials += len(runs)
        drops = [r["detectable_drop"] for r in runs if r.get("detectable_drop") is not None]
        spread = (entry.get("calibration") or {}).get("spread")
        row = [f"`{short}`", f"{entry['tolerance']:.1%}", f"{spread:.2%}" if spread is not None else "-",
               f">= {statistics.median(drops):.1%}" if drops else "-", f"{wrong}/{len(runs)}"]
        for s in shares:
            got = [timed_cases(r).get(case_id) for r in slowed_runs[s]]
            got = [g for g in got if g]
            hit = sum(g["verdict"] == "regressed" for g in got)
            caught[s][0] += hit
            caught[s][1] += len(got)
            changes = [g["change"] for g in got if g.get("change") is not None]
            row.append(f"{hit}/{len(got)}, {statistics.median(changes):+.1%}" if changes else f"{hit}/{len(got)}")
        lines.append("| " + " | ".join(row) + " |")
    summary = [f"false alarms: {alarms}/{trials} case-runs ({alarms / trials:.1%})" if trials else "no clean runs"]
    summary += [f"detected at +{s:.0%}: {c}/{n} ({c / n:.0%})" for s, (c, n) in caught.items() if n]
    return "\n".join(lines) + "\n\n" + "; ".join(summary) + "\n" + catch_line(blessed, slowed_runs) + "\n"


def catch_line(blessed: dict[str, Any], slowed_runs: dict[float, list[dict[str, Any]]], share: float = 0.05) -> str:
    """'N of M cases catch a 5% regression': the cases every run slowed by share failed as regressed."""
    runs = next((r for s, r in slowed_runs.items() if abs(s - share) < 1e-9), None)
    if not runs:
        return f"no runs slowed by {share:.0%}"
    every = [case_id for case_id in blessed
             if all((timed_cases(r).get(case_id) or {}).get("verdict") == "regressed" for r in runs)]
    return f"{len(every)} of {len(blessed)} cases catch a {share:.0%} regression (regressed in each of {len(runs)} slowed runs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--calibrate", type=int, default=5, help="measurements per case when blessing")
    parser.add_argument("--processes", type=int, default=2, help="calibrated blesses, each a fresh process")
    parser.add_argument("--runs", type=int, default=5, help="clean gate runs")
    parser.add_argument("--slowdowns", default="0.02,0.05,0.10", help="injected slowdowns, fractions")
    parser.add_argument("--repeat", type=int, default=2, help="gate runs per slowdown")
    parser.add_argument("--cases", nargs="+", default=CASES)
    parser.add_argument("--against", type=Path, default=None,
                        help="gate against this baseline folder (the committed files) instead of blessing: a machine "
                             "that blessed nothing")
    parser.add_argument("--warm-caches", dest="fresh_caches", action="store_false",
                        help="share the user's compile caches between processes (default: each its own, empty)")
    parser.add_argument("extra", nargs="*", help="after --: more pytest arguments")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.against is not None:
        if not (out / "baselines").is_dir():
            # The committed files, copied once: the study never writes the repository's, and a study that goes on
            # after a cut-off judges every run against the files its first runs were judged against.
            (out / "baselines").mkdir()
            for f in args.against.glob("*.json"):
                (out / "baselines" / f.name).write_bytes(f.read_bytes())
        bless = run_pytest(out, "clean-first", args.cases, args.extra, fresh_caches=args.fresh_caches)
    for i in range(0 if args.against is not None else args.processes):  # each a fresh process, its evidence added
        bless = run_pytest(out, f"bless{i}", args.cases, args.extra, bless=args.calibrate, fresh_caches=args.fresh_caches)
    bless_view = {"cases": blessed_entries(out / "baselines", bless)}
    clean = [run_pytest(out, f"clean{i}", args.cases, args.extra, fresh_caches=args.fresh_caches) for i in range(args.runs)]
    slowed_runs = {}
    for share in (float(s) for s in args.slowdowns.split(",") if s):
        slowed_runs[share] = [run_pytest(out, f"slow{share:g}-{i}", args.cases, args.extra, slowdown=share,
                                         fresh_caches=args.fresh_caches) for i in range(args.repeat)]
    text = table(bless_view, clean, slowed_runs)
    (out / "study.md").write_text(text)
    print(text)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("stopped: the same command again goes on from the last run that finished")
