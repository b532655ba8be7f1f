"""Does holding inductor's pointwise autotuning make the vs_compile reference slower? (GPU; issue 46, "Where picks do
not recur" in docs/results/gate-study-h200.md)

Usage: python -m lab.pointwise_pick_probe OUT.json [--hold]

The suite compiles each vs_compile reference with inductor's deterministic mode (perftests/support/compiled.py). That
mode filters reduction configs, but a pointwise kernel is still timed against its other candidates in every process,
and the bias-GELU reference's GELU kernel came out at block 128 in one process and 256 in another. --hold sets
"triton.autotune_pointwise" False (the first candidate, no timing), as the suite now does; without it, True (as the
suite did when this probe decided it). Run in several fresh processes with and without it, on one card: the question
is whether the held reference is ever slower than the autotuned one, not only whether it varies less.

Per reference (the suite's eager functions at the suite's GPU shapes): the median of 200 calls, each between CUDA
events after an L2-sized write (launches included), and the launch grid and block of each inductor kernel it ran
(the picks) with its median traced duration over 50 calls back to back (the kernel alone).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

PROFILED = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    import torch

    from perftests.kernels.elementwise import add_relu_scale_eager
    from perftests.support import compiled as suite
    from perftests.support.elementwise import SCALE, inputs
    from perftests.support.matmul import operands
    from perftests.test_triton_elementwise import add
    from perftests.test_triton_matmul import GPU_SHAPES, linear_bias_gelu

    options = dict(suite.OPTIONS, **{"triton.autotune_pointwise": not args.hold})
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, dtype=torch.int32, device="cuda")

    def gelu_case(shape: str) -> tuple[Any, tuple[Any, ...]]:
        M, N, K = GPU_SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        x, w = operands("cuda", torch.bfloat16, M, N, K, g)
        return linear_bias_gelu, (x, w, torch.randn(N, generator=g, device="cuda", dtype=torch.bfloat16))

    cases = {
        "bias_gelu-4096": gelu_case("4096"),
        "bias_gelu-8192": gelu_case("8192"),
        "add-bf16": (add, inputs("cuda", torch.bfloat16, 0)),
        "add_relu_scale-bf16": (lambda x, y: add_relu_scale_eager(x, y, SCALE), inputs("cuda", torch.bfloat16, 0)),
    }
    rows = {}
    for name, (fn, tensors) in cases.items():
        torch._dynamo.reset()
        compiled = torch.compile(fn, options=dict(options), dynamic=False, fullgraph=True)
        for _ in range(3):
            compiled(*tensors)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.calls):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            compiled(*tensors)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        rows[name] = dict(median_ms=round(statistics.median(times), 5), picks=picks(torch, compiled, tensors))
        print(json.dumps({name: rows[name]}), flush=True)
    Path(args.out).write_text(json.dumps(dict(hold=args.hold, options=options, rows=rows), indent=1))


def picks(torch: Any, compiled: Any, tensors: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The inductor kernels of PROFILED calls back to back, as speedgate.codegen's facts (name, grid, block,
    registers), each with the median of its traced durations (the kernel alone, whatever the host's launches)."""
    import os
    import tempfile

    from speedgate.codegen import trace_kernels

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED):
            compiled(*tensors)
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        trace = json.loads(Path(path).read_text())
    finally:
        os.unlink(path)
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
              and e.get("cat") == "kernel" and str(e.get("name")).startswith("triton_")]
    found = trace_kernels((str(e.get("name")), None, json.dumps(e.get("args") or {})) for e in events)
    for kernel in found:
        kernel["median_us"] = round(statistics.median(float(e["dur"]) for e in events if e.get("name") == kernel["name"]), 3)
    return found

if __name__ == "__main__":
    main()
