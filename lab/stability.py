"""Run the gate N times and set its speedups beside triton.testing.do_bench's for the same callables (GPU only).

Usage: python lab/stability.py --runs 5 --out DIR [-- extra pytest args]
Writes DIR/runs.json (every run's report) and prints a table: per case, the gate's median speedup over
the runs, their spread ((max - min) / median), the widest 95% half-width, and do_bench's ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for `perftests`, imported by do_bench_ratios


def gate_runs(runs: int, out: Path, extra: list[str]) -> list[dict]:
    reports = []
    for i in range(runs):
        path = out / f"run{i}.json"
        cmd = [sys.executable, "-m", "pytest", "perftests", "-q", "-p", "no:cacheprovider", "--speedgate-json", str(path), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print(f"run {i}: exit {proc.returncode}: {proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ''}", flush=True)
        if proc.returncode not in (0, 1):
            print(proc.stdout[-4000:], proc.stderr[-4000:])
            raise SystemExit(proc.returncode)
        reports.append(json.loads(path.read_text()))
        path.unlink()
    return reports


def do_bench_ratios(repeats: int) -> dict[str, list[float]]:
    import torch
    import triton.testing

    from perftests.support import elementwise as suite

    ratios: dict[str, list[float]] = {}
    for kind in ("vector_add", "add_relu_scale"):
        for dtype, dtype_id in zip(suite.DTYPES, suite.DTYPE_IDS):
            x, y = suite.inputs("cuda", dtype)
            reference, optimized, _ = suite.pair(kind, x, y)
            case = f"perftests/test_triton_elementwise.py::test_{kind}[{dtype_id}]"
            for _ in range(repeats):
                ref_ms = triton.testing.do_bench(reference, warmup=25, rep=200, return_mode="median")
                opt_ms = triton.testing.do_bench(optimized, warmup=25, rep=200, return_mode="median")
                ratios.setdefault(case, []).append(ref_ms / opt_ms)
                ratios.setdefault(case + "#ms", []).append(opt_ms)
            del x, y
            torch.cuda.empty_cache()
    return ratios


def copy_bandwidth_gbps() -> float:
    """Device-to-device copy of 1 GiB, bytes read + written over do_bench's median: the memory ceiling."""
    import torch
    import triton.testing

    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    reports = gate_runs(args.runs, args.out, args.extra)
    (args.out / "runs.json").write_text(json.dumps(reports, indent=1))
    bench = do_bench_ratios(args.runs)
    print(f"copy bandwidth (1 GiB device-to-device, do_bench median): {copy_bandwidth_gbps():.0f} GB/s")
    by_case: dict[str, list[dict]] = {}
    for report in reports:
        for case in report["cases"]:
            if case["timed"]:
                by_case.setdefault(case["case_id"], []).append(case)
    header = f"{'case':<62} {'gate speedup (median of runs)':>30} {'spread':>7} {'max ±CI':>8} {'opt ms':>8} {'GB/s':>6} {'do_bench':>9} {'spread':>7}"
    print(header)
    print("-" * len(header))
    for case_id, cases in by_case.items():
        speedups = [c["speedup"] for c in cases]
        mid = statistics.median(speedups)
        spread = (max(speedups) - min(speedups)) / mid
        halfwidth = max(c["noise"] for c in cases)
        opt_ms = statistics.median(c["optimized_ms"] for c in cases)
        gbps = statistics.median(c["achieved_gbps"] or 0 for c in cases)
        db = bench.get(case_id, [])
        db_mid = statistics.median(db) if db else float("nan")
        db_spread = (max(db) - min(db)) / db_mid if db else float("nan")
        runs = " ".join(f"{s:.3f}" for s in speedups)
        print(f"{case_id:<62} {mid:>7.3f}x ({runs}) {spread:>6.1%} {halfwidth:>7.1%} {opt_ms:>8.4f} {gbps:>6.0f} {db_mid:>8.3f}x {db_spread:>6.1%}")


if __name__ == "__main__":
    main()
