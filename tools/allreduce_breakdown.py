"""Where the time of the quantized all-reduce goes: each stage timed by itself on every rank (CUDA events after
warm-up, a barrier before each call, median of 30 calls, the slowest rank's median), next to NCCL's bf16
all-reduce and the raw collectives at the same byte counts.

    python tools/allreduce_breakdown.py [--mb 256] [--world N]   (on a machine with N >= 2 GPUs)

Prints a Markdown table: stage, ms, and GB/s of the bytes each rank's buffer holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def stages(numel: int, reps: int = 30, pieces: tuple[int, ...] = (1, 4)) -> dict:
    import torch
    import torch.distributed as dist

    from perftests.kernels import allreduce, quant
    from perftests.support import nccl_cases
    from speedgate.distributed import slowest, timed_on_rank

    rank, world, device = nccl_cases.setup()
    try:
        x = nccl_cases.inputs(numel, rank, device)
        ar = allreduce.QuantizedAllReduce(numel, world, device)
        p2p = {k: allreduce.P2PQuantizedAllReduce(numel, world, device, pieces=k) for k in pieces}
        out = torch.empty_like(x)
        send, recv, reduced, gathered = ar.send[0], ar.recv[0], ar.reduced[0], ar.gathered[0]
        scratch = x.clone()
        half = torch.empty(numel // 2, dtype=torch.bfloat16, device=device)
        a2a_bf16_out = torch.empty_like(x)
        packed = send.buffer.numel()
        steps = {
            "nccl all_reduce bf16 (the reference)": (lambda: dist.all_reduce(scratch), 2 * numel),
            "nccl all_reduce bf16, half the elements (the int8 bytes)": (lambda: dist.all_reduce(half), numel),
            "quantize kernel": (lambda: quant.quantize(x, packed=send), 2 * numel),
            "all_to_all int8 codes + scales": (lambda: dist.all_to_all_single(recv.buffer, send.buffer), packed),
            "reduce + requantize kernel": (lambda: quant.reduce_requantize(packed=recv, out=reduced), packed),
            "all_gather int8 codes + scales": (lambda: allreduce.all_gather(gathered.buffer, reduced.buffer), packed),
            "dequantize kernel": (lambda: quant.dequantize(packed=gathered, out=out), 2 * numel),
            "quantized all-reduce, whole": (lambda: ar(x, out), 2 * numel),
            **{f"quantized all-reduce over P2P copies (copy engines), {k} piece(s)": ((lambda f=f: f(x, out)), 2 * numel)
               for k, f in p2p.items()},
            "all_to_all bf16 (for comparison)": (lambda: dist.all_to_all_single(a2a_bf16_out, x), 2 * numel),
        }
        rows = {}
        for name, (fn, nbytes) in steps.items():
            for _ in range(3):
                fn()
            median = statistics.median(timed_on_rank(fn) for _ in range(reps))
            rows[name] = {"ms": slowest([median])[0], "bytes": nbytes}
        return {"world": world, "numel": numel, "rows": rows, "gpu": torch.cuda.get_device_name()}
    finally:
        nccl_cases.teardown()


def main() -> None:
    import torch

    from speedgate.launch import run_ranks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--world", type=int, default=torch.cuda.device_count())
    parser.add_argument("--json", type=Path)
    parser.add_argument("--pieces", type=int, nargs="+", default=[1, 4], help="piece counts of the P2P form to time")
    args = parser.parse_args()
    result = run_ranks("tools.allreduce_breakdown:stages", args.world, {"numel": args.mb * 2**20 // 2, "pieces": args.pieces}, timeout_s=300)[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"{args.world} x {result['gpu']}, {args.mb} MB of bf16 per rank")
    print("| stage | ms | GB/s |\n| --- | ---: | ---: |")
    parts = 0.0
    for name, row in result["rows"].items():
        if name.endswith("kernel") or name.startswith(("all_to_all int8", "all_gather")):
            parts += row["ms"]
        print(f"| {name} | {row['ms']:.3f} | {row['bytes'] / row['ms'] / 1e6:.0f} |")
    print(f"| sum of the quantized stages, run one at a time | {parts:.3f} | - |")


if __name__ == "__main__":
    main()
