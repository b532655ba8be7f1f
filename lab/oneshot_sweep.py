"""The one-shot quantized all-reduce's tiles, warps and waves swept against NCCL's bf16 all-reduce, beside the
link's copy-engine ceiling (2 GPUs; perftests/kernels/oneshot_allreduce.py)

Usage: python -m lab.oneshot_sweep OUT [--sizes 64 256 1024] [--calls 40]

Each rank, for each size: NCCL's bf16 all-reduce, a peer copy of the one-shot's wire bytes through symmetric
memory (the copy engines: the link's ceiling for that traffic), and the one-shot kernel at each config, each timed
as the median of `calls` calls between CUDA events (a barrier and a synchronise before each call, so both ranks
start together), plus each config's error against the bound and whether both ranks' results are the same bits.
Rank 0 prints a table and writes OUT/oneshot_sweep.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

CONFIGS = [dict(rows=r, warps=w, waves=v) for r, w, v in itertools.product((8, 16), (8, 16), (1, 4))]


def rank_card(device: Any) -> str | None:
    """The anonymized id of the card this rank runs on (speedgate.hardware.detect names the first visible one, which
    is rank 0's for every rank here)."""
    from speedgate.hardware import gpu_hardware, visible_gpu_tokens

    tokens = visible_gpu_tokens()
    return (gpu_hardware(tokens[device.index]) or {}).get("card") if device.index < len(tokens) else None


def median_ms(torch: Any, dist: Any, fn: Any, calls: int) -> float:
    """fn's median time in ms over `calls` calls after 3 untimed ones, both ranks in step before each (a synchronize
    and a barrier), each between CUDA events."""
    times = []
    for _ in range(3):
        fn()
    for _ in range(calls):
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure_form(torch: Any, dist: Any, allreduce: Any, x: Any, out: Any, calls: int, nccl_ms: float,
                 wire: int) -> dict[str, Any]:
    """One one-shot all-reduce at one size: its error against the bound and whether both ranks hold the same bits
    (one call), then its median time (median_ms), its speedup over nccl_ms, its wire bytes' rate and whether a wait
    of any call spun out."""
    from perftests.support.nccl_cases import _identical_on_ranks, error_check

    error = error_check(x, allreduce(x, out), requantized=False)
    same = _identical_on_ranks(out)
    ms = median_ms(torch, dist, lambda: allreduce(x, out), calls)
    return {"ms": ms, "speedup": nccl_ms / ms, "link_gbps": wire / ms / 1e6,
            "error_over_bound": error["max_error_over_bound"], "identical": same, "spun_out": allreduce.failed()}


def on_two_ranks(target: str, payload: dict[str, Any], out: Path, name: str, timeout_s: float) -> tuple[list[Any], str]:
    """target run on two ranks (speedgate.launch.run_ranks); their results written to OUT/name, and returned with
    the two cards, as a line."""
    from speedgate.launch import run_ranks

    results = run_ranks(target, 2, payload, timeout_s=timeout_s)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(results))
    return results, ", ".join(r["card"] or "?" for r in results)


def rank_main(sizes: list[int], calls: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from perftests.kernels.oneshot_allreduce import OneShotQuantizedAllReduce
    from perftests.support.nccl_cases import inputs, setup, teardown
    from speedgate.hardware import detect

    rank, world, device = setup()
    try:
        rows: list[dict[str, Any]] = []
        for size_mb in sizes:
            numel = size_mb * 2**20 // 2
            x = inputs(numel, rank, device)
            out = torch.empty_like(x)
            scratch = x.clone()
            nccl_ms = median_ms(torch, dist, lambda s=scratch: dist.all_reduce(s), calls)
            wire = numel + numel // 1024 * 4  # int8 codes and fp32 scales
            sym = symm_mem.empty(wire, dtype=torch.int8, device=device)
            handle = symm_mem.rendezvous(sym, dist.group.WORLD.group_name)
            peer = handle.get_buffer(1 - rank, (wire,), torch.int8)
            local = torch.empty(wire, dtype=torch.int8, device=device)
            copy_ms = median_ms(torch, dist, lambda d=local, p=peer: d.copy_(p), calls)
            row: dict[str, Any] = {"size_mb": size_mb, "nccl_ms": nccl_ms, "copy_ms": copy_ms,
                                   "copy_gbps": wire / copy_ms / 1e6, "configs": []}
            for config in CONFIGS:
                allreduce = OneShotQuantizedAllReduce(numel, world, device, **config)
                row["configs"].append({**config, **measure_form(torch, dist, allreduce, x, out, calls, nccl_ms, wire)})
                del allreduce
            rows.append(row)
        fp = detect(None)
        return {"rank": rank, "card": rank_card(device), "key": fp.key, "rows": rows}
    finally:
        teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    results, cards = on_two_ranks("lab.oneshot_sweep:rank_main", {"sizes": args.sizes, "calls": args.calls}, args.out,
                                  "oneshot_sweep.json", timeout_s=540)
    for row in results[0]["rows"]:
        print(f"{row['size_mb']} MB on {results[0]['key']} ({cards}): NCCL bf16 {row['nccl_ms']:.3f} ms; peer copy of the "
              f"wire bytes {row['copy_ms']:.3f} ms ({row['copy_gbps']:.0f} GB/s)")
        for c in sorted(row["configs"], key=lambda c: c["ms"]):
            print(f"  rows {c['rows']:2} warps {c['warps']:2} waves {c['waves']}: {c['ms']:.3f} ms, {c['speedup']:.2f}x NCCL, "
                  f"{c['link_gbps']:.0f} GB/s on the link, error/bound {c['error_over_bound']:.3f}, identical "
                  f"{c['identical']}, spun out {c['spun_out']}")


if __name__ == "__main__":
    main()
