"""Does inductor's timing of reduction configs change the ladder's compiled rungs from one process to the next, and
what would holding one config per reduction cost? (GPU; issue 46, docs/results/gate-study.md, section 10)

Usage: python -m lab.reduction_pick_probe OUT.json [--hold] [--calls 100]

test_compile_ladder holds one config per pointwise kernel (one_pointwise_config), but inductor still times each
reduction's configs in the process that compiles it: three processes of one study compiled rung 4's reduction
kernels with three sets of registers and shared memory, and its optimized side ran 9% apart. --hold also filters each
reduction's configs to the one inductor's deterministic mode keeps (inductor's
test_configs.force_filter_reduction_configs), without the rest of that mode. Run in fresh processes (empty caches),
with and without it, on one card: does the hold make every process compile the same kernels, and is the held pass
ever slower than the timed one?

Per compiled rung (3 and 4): the median of CALLS calls, each between CUDA events (launches included), and each
Triton reduction kernel's launch (grid, block, registers, shared memory) with its median traced duration over 20
calls. Exits 2, saying so, where --hold is asked and this torch has no such setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

RUNGS = ("compile", "fp8_linear")
TRACED = 20
WARM = 10
SETTING = "force_filter_reduction_configs"


def reductions(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The Triton reduction kernels of a Chrome trace (inductor names them triton_red_* and triton_per_*), one row per
    name and launch shape, in the order of their first launch, with the median duration of its launches (us)."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for event in trace.get("traceEvents", []):
        name = str(event.get("name", ""))
        if event.get("cat") != "kernel" or not name.startswith(("triton_red_", "triton_per_")):
            continue
        args = event.get("args", {})
        key = (name, tuple(args.get("grid", ())), tuple(args.get("block", ())))
        row = rows.setdefault(key, {"name": name, "grid": args.get("grid"), "block": args.get("block"),
                                    "registers": args.get("registers per thread"),
                                    "shared_bytes": args.get("shared memory"), "us": []})
        row["us"].append(float(event.get("dur", 0.0)))
    return [{**row, "us": round(statistics.median(row["us"]), 2), "launches": len(row["us"])} for row in rows.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()

    import torch
    import torch._inductor.config as inductor_config

    from perftests.support.compile_time import one_pointwise_config
    from perftests.test_compile_ladder import Ladder
    from speedgate.timers import median_event_ms

    available = hasattr(inductor_config.test_configs, SETTING)
    out: dict[str, Any] = {"hold": args.hold, "setting_available": available, "torch": torch.__version__,
                           "device": torch.cuda.get_device_name(0), "rungs": {}}
    if args.hold and not available:
        Path(args.out).write_text(json.dumps(out, indent=1))
        sys.exit(f"reduction_pick_probe: torch {torch.__version__} has no inductor test_configs.{SETTING}")
    patch = {f"test_configs.{SETTING}": True} if args.hold else {}
    with one_pointwise_config(), inductor_config.patch(patch):
        ladder = Ladder("cuda")
        for rung in RUNGS:
            run = ladder.runner(rung)
            ladder.output(rung)  # the compile
            for _ in range(WARM):
                run()
            torch.cuda.synchronize()
            ms = median_event_ms(torch, run, calls=args.calls)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(TRACED):
                    run()
                torch.cuda.synchronize()
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "trace.json"
                prof.export_chrome_trace(str(path))
                trace = json.loads(path.read_text())
            out["rungs"][rung] = {"ms": round(ms, 4), "compile_s": ladder.first_call_s[rung],
                                  "reductions": reductions(trace)}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({rung: row["ms"] for rung, row in out["rungs"].items()}))


if __name__ == "__main__":
    main()
