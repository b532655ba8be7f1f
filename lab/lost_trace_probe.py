"""When does the profiler lose a trace of the audit's profiled calls, and what keeps it? (GPU; issue 46,
docs/results/gate-study-h200.md, the tenth study)

Usage: python -m lab.lost_trace_probe OUT.json [--pairs 20] [--settle 0,0.2] [--between-tries]

With TEARDOWN_CUPTI=1 (which the audit asks for), a trace's CUPTI teardown runs on a CUDA call after the trace ends,
and can land inside the next trace, which then holds no device activity (pytorch/kineto#1554). The audit traces each
side of a comparison in turn (CudaTimer.profile_calls), and each of those traces may be taken up to PROFILE_TRIES
times back to back inside CudaTimer.queued_ahead, when the host did not queue every call behind the hold. This
probe traces pairs of sides as the audit does, in one process that also replays CUDA graphs (a reduce-overhead
compile, as the suite's processes do), and records per trace: whether it held device activity, and how many sessions
queued_ahead opened for it. Each --settle value (seconds: synchronize, sleep, synchronize before each side's trace)
runs --pairs pairs of each workload; --between-tries also settles between queued_ahead's tries.

Workloads: `launches` (an eager bf16 stack of many small kernels, whose host queueing under the profiler can outlast
the hold) and `graphs` (the reduce-overhead compile's replays), each as the optimized side against a plain matmul.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def settle(torch: Any, seconds: float) -> None:
    if seconds > 0:
        torch.cuda.synchronize()
        time.sleep(seconds)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--settle", default="0,0.2")
    parser.add_argument("--between-tries", action="store_true")
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from speedgate.timers import cuda as cuda_timers
    from speedgate.timers.cuda import CudaTimer, ask_cupti_teardown, traced_intervals

    ask_cupti_teardown()
    torch.manual_seed(0)
    dev = "cuda"
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    layers = [torch.randn(256, 256, device=dev, dtype=torch.bfloat16) for _ in range(64)]
    x = torch.randn(64, 256, device=dev, dtype=torch.bfloat16)

    def matmul() -> Any:
        return a @ a

    def launches() -> Any:
        h = x
        for w in layers:
            h = torch.nn.functional.gelu(h @ w) * 0.5 + h
        return h

    mlp = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(dev, torch.bfloat16)
    compiled = torch.compile(mlp, mode="reduce-overhead")
    xin = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)

    def graphs() -> Any:
        with torch.no_grad():
            return compiled(xin)

    for _ in range(5):
        graphs()
    timer = CudaTimer(torch)
    sessions: list[int] = []

    def tracing() -> Any:
        sessions[-1] += 1
        return profile(activities=[ProfilerActivity.CUDA])

    if args.between_tries:
        original = timer.queued_ahead

        def queued_ahead(fns: Any, context: Any) -> Any:
            def settled() -> Any:
                if sessions[-1]:
                    settle(torch, 0.2)
                return context()
            return original(fns, settled)

        timer.queued_ahead = queued_ahead  # type: ignore[method-assign]

    rows: list[dict[str, Any]] = []
    for seconds in (float(s) for s in args.settle.split(",")):
        for name, opt in (("launches", launches), ("graphs", graphs)):
            lost = 0
            for pair in range(args.pairs):
                timer.for_sides(matmul, opt)
                for side, fn in (("reference", matmul), ("optimized", opt)):
                    settle(torch, seconds)
                    sessions.append(0)
                    for _ in range(3):
                        fn()
                    _, prof = timer.queued_ahead([fn] * cuda_timers.PROFILED_CALLS, tracing)
                    traced = traced_intervals(prof, torch.autograd.DeviceType.CUDA)
                    lost += not traced
                    rows.append({"settle_s": seconds, "workload": name, "pair": pair, "side": side,
                                 "sessions": sessions[-1], "traced": len(traced), "ahead": timer.last_ahead})
            opened = [r["sessions"] for r in rows if r["settle_s"] == seconds and r["workload"] == name]
            print(f"settle {seconds} s, {name}: {lost} of {2 * args.pairs} traces lost; sessions per trace "
                  f"{sorted(set(opened))} (more than one in {sum(o > 1 for o in opened)})", flush=True)
    with open(args.out, "w") as f:
        json.dump({"teardown": os.environ.get("TEARDOWN_CUPTI"), "between_tries": args.between_tries,
                   "device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
