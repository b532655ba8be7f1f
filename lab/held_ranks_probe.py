"""Do the hosts set the two-GPU cases' spread? (GPU, 2 GPUs; issue 49)

Usage: python -m lab.held_ranks_probe OUT.json [--cases quantized:64 pipelined:256 oneshot:64] [--processes 2]

Each case is perftests/support/nccl_cases.allreduce_case (VARIANT:MB), measured as the gate measures it (a fresh
pair of rank processes, speedgate.launch.run_ranks, the default policy), `processes` times timed from idle (a barrier
of the hosts before every call: the launch and the hosts' skew counted) and as many times held (held=True: the
devices' work alone), the two modes alternating. Prints, per case and mode, each process's speedup (the ratio of
the sides' medians), the spread across processes ((max - min) / median: the calibration's spread divides this
further by d2(N), 1.128 for two; speedgate.evidence.between_run_spread) and the median robust CV of each side's
samples; writes every process's figures to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from perftests.kernels.oneshot_allreduce import OneShotQuantizedAllReduce  # noqa: F401 - fails early without it
from speedgate.launch import run_ranks
from speedgate.stats import robust_cv

PIECES = 4  # as test_nccl.PIECES
TIMEOUT_S = 300.0


def one_process(variant: str, size_mb: int, held: bool, world: int) -> dict[str, Any]:
    """One measurement of a case in a fresh pair of rank processes: its speedup, its sides' medians and CVs."""
    from perftests.test_nccl import ONESHOT_CONFIGS

    payload: dict[str, Any] = dict(numel=size_mb * 2**20 // 2, variant=variant, pieces=PIECES, check=False,
                                   held=held)
    if variant == "oneshot":
        payload["config"] = ONESHOT_CONFIGS[size_mb]
    samples = run_ranks("perftests.support.nccl_cases:allreduce_case", world, payload, timeout_s=TIMEOUT_S)[0]["samples"]
    ref, opt = samples["reference_ms"], samples["optimized_ms"]
    return {"timer": samples["timer"], "rounds": len(ref), "reference_ms": statistics.median(ref),
            "optimized_ms": statistics.median(opt), "speedup": statistics.median(ref) / statistics.median(opt),
            "reference_cv": robust_cv(ref), "optimized_cv": robust_cv(opt)}


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cases", nargs="+", default=["quantized:64", "pipelined:256", "oneshot:64"])
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit(f"lab.held_ranks_probe needs 2 GPUs; {world} visible")
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case in args.cases:
        variant, size = case.split(":")
        runs: dict[str, list[dict[str, Any]]] = {"idle": [], "held": []}
        for _ in range(args.processes):
            for mode in ("idle", "held"):
                runs[mode].append(one_process(variant, int(size), mode == "held", world))
        found[case] = runs
        for mode, taken in runs.items():
            speedups = [r["speedup"] for r in taken]
            print(f"{case:15s} {mode:4s} {taken[0]['timer']:30s} speedups "
                  + " ".join(f"{s:.4f}x" for s in speedups)
                  + f"  spread {spread(speedups):6.2%}  ref {statistics.median(r['reference_ms'] for r in taken):.4f} ms"
                  f" cv {statistics.median(r['reference_cv'] for r in taken):6.2%}"
                  f"  opt {statistics.median(r['optimized_ms'] for r in taken):.4f} ms"
                  f" cv {statistics.median(r['optimized_cv'] for r in taken):6.2%}", flush=True)
    args.out.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
