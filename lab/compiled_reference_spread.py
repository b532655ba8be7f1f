"""Is the compiled reference's speed settled per process, and what does its compile cost? (GPU)

Usage: python -m lab.compiled_reference_spread OUT [--processes 4] [--modes autotune,suite] [-- pytest args]

Runs the given cases (default: the bf16 elementwise and row-wise files) in fresh processes, each with empty compile
caches of its own, as a fresh CI runner starts, once per mode:
- suite: the suite as it is (perftests.support.compiled: inductor's deterministic mode, no choice timed on the device);
- autotune: the reference the suite had before, torch.compile mode max-autotune-no-cudagraphs (inductor times its
  candidates per process), loaded as a pytest plugin (`-p lab.compiled_reference_spread`, environment variable
  LAB_COMPILED_MODE=autotune) that replaces perftests.support.compiled.compiled. It changes nothing else.
Writes OUT/<mode>-<i>.json (the --speedgate-json reports) and prints, per vs_compile case and mode, the compiled
reference's median time, its first call (the compile) and the speedup in each process, their range over the median,
and the spread the gate's calibration would take from them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = "LAB_COMPILED_MODE"
DEFAULT_CASES = ["perftests/test_triton_elementwise.py", "perftests/test_triton_rowwise.py", "-k", "bfloat16"]
AUTOTUNE = "max-autotune-no-cudagraphs"


def pytest_configure(config: Any) -> None:
    """As a pytest plugin: compile every vs_compile reference in max-autotune-no-cudagraphs mode."""
    if os.environ.get(VARIABLE) != "autotune":
        return
    import torch

    from perftests.support import compiled as suite

    cache: dict[Any, Any] = {}

    def autotuned(fn: Any) -> Any:
        if fn not in cache:
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, suite.RECOMPILE_LIMIT)
            cache[fn] = torch.compile(fn, mode=AUTOTUNE, dynamic=False, fullgraph=True)
        return cache[fn]

    plain = suite.compiled
    suite.compiled = autotuned
    config.add_cleanup(lambda: setattr(suite, "compiled", plain))


def run(out: Path, mode: str, index: int, cases: list[str]) -> Path:
    report = out / f"{mode}-{index}.json"
    if report.exists():
        return report
    with tempfile.TemporaryDirectory() as caches:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{caches}/inductor", "TRITON_CACHE_DIR": f"{caches}/triton",
               VARIABLE: mode,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
        done = None
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                                   "lab.compiled_reference_spread", "-q", "--speedgate-json", str(report), *cases],
                                  cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
        finally:  # cut off (a deadline's SIGINT) or crashed: its report holds part of the cases; the next call redoes it
            if (done is None or done.returncode not in (0, 1)) and report.exists():
                report.replace(report.with_suffix(".incomplete.json"))
    return report


def table(reports: dict[str, list[Path]]) -> list[str]:
    from speedgate.evidence import between_run_spread

    lines = ["| case | mode | compiled ms (median of processes) | first call s (median) | speedup per process | "
             "range / median | spread |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: |"]
    rows: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for mode, paths in reports.items():
        for path in paths:
            if not path.exists():
                continue
            for case in json.loads(path.read_text())["cases"]:
                if case.get("timed") and case["case_id"].endswith("::vs_compile"):
                    rows.setdefault(case["case_id"], {}).setdefault(mode, []).append(
                        (case["reference_ms"], case["speedup"], (case.get("reference_first_ms") or 0.0) / 1e3))
    for case_id, modes in sorted(rows.items()):
        for mode, found in modes.items():
            speedups = [s for _, s, _ in found]
            spread = f"{between_run_spread(speedups):.1%}" if len(speedups) > 1 else "-"
            lines.append(f"| `{case_id.split('::', 1)[1]}` | {mode} | {statistics.median(m for m, _, _ in found):.4f} | "
                         f"{statistics.median(f for _, _, f in found):.1f} | "
                         f"{', '.join(f'{s:.3f}' for s in speedups)} | "
                         f"{(max(speedups) - min(speedups)) / statistics.median(speedups):.1%} | {spread} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--modes", default="autotune,suite")
    args, rest = parser.parse_known_args(argv)
    cases = [a for a in rest if a != "--"] or DEFAULT_CASES
    args.out.mkdir(parents=True, exist_ok=True)
    modes = args.modes.split(",")
    reports: dict[str, list[Path]] = {mode: [] for mode in modes}
    for i in range(args.processes):  # alternating, so that drift over the lease falls on both modes alike
        for mode in modes:
            reports[mode].append(run(args.out, mode, i, cases))
    text = "\n".join(table(reports))
    (args.out / "spread.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
