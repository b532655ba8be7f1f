"""Where the one-shot quantized all-reduce's time goes (issue 49), on 2 GPUs: the link's ceilings for SM stores and
loads to the peer beside the copy engines', then the suite's kernel (perftests/kernels/oneshot_allreduce.py) at
several tiles, waves and shares of senders

Usage: python -m lab.oneshot_forms OUT [--sizes 256 1024] [--calls 30] [--configs ROWS:WARPS:WAVES:SENDERS ...]

Both ranks move data at once in every measurement, as the all-reduce does (both directions of the link busy), on
buffers the size of the all-reduce's wire bytes (int8 codes and fp32 scales):
  - ce_push / ce_pull: a copy into / out of the peer's symmetric-memory buffer on the copy engines;
  - sm_push / sm_pull: a Triton copy kernel doing the same with SM stores / loads;
  - hbm: the same copy kernel within the device (the local memory's ceiling for that traffic).
Then the one-shot kernel at each config (SENDERS: the share of its programs that only send; the rest only reduce),
its result checked against the bound and across the ranks (the same bits). Each time is the median of `calls` calls
between CUDA events, a barrier and a synchronise before each. Rank 0 prints a table and writes
OUT/oneshot_forms.json. The form before the split (every program sending, then reducing) is at commit 0bd84a4.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

from lab.oneshot_sweep import measure_form, median_ms, on_two_ranks, rank_card

# (label, grid as a multiple of the SM count, warps, int32 elements a program copies per step)
COPY_CONFIGS = [("1x-16w", 1, 16, 8192)]
# the suite kernel's configs tried by default: rows, warps, waves, senders as a fraction of the programs
CONFIGS = ["16:16:4:0.5", "32:16:16:0.5", "64:16:16:0.5", "32:16:32:0.5", "64:32:16:0.5", "32:16:16:0.4",
           "32:16:16:0.6"]


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=ok), mask=ok)


def _ceilings(torch: Any, dist: Any, symm_mem: Any, rank: int, wire: int, sms: int, calls: int,
              device: Any) -> list[dict[str, Any]]:
    words = wire // 4
    sym = symm_mem.empty(words, dtype=torch.int32, device=device)
    handle = symm_mem.rendezvous(sym, dist.group.WORLD.group_name)
    peer = handle.get_buffer(1 - rank, (words,), torch.int32)
    local = torch.zeros(words, dtype=torch.int32, device=device)
    other = torch.zeros(words, dtype=torch.int32, device=device)
    rows: list[dict[str, Any]] = [
        {"how": "ce_push", "ms": median_ms(torch, dist, lambda p=peer, d=local: p.copy_(d), calls)},
        {"how": "ce_pull", "ms": median_ms(torch, dist, lambda p=peer, d=local: d.copy_(p), calls)}]
    for label, mult, warps, block in COPY_CONFIGS:
        grid = (mult * sms,)
        for how, src, dst in (("sm_push", local, peer), ("sm_pull", peer, local), ("hbm", local, other)):
            def run(src=src, dst=dst, grid=grid, warps=warps, block=block) -> None:
                _copy_kernel[grid](src, dst, words, BLOCK=block, num_warps=warps)
            rows.append({"how": how, "config": label, "ms": median_ms(torch, dist, run, calls)})
    for row in rows:
        row["gbps"] = wire / row["ms"] / 1e6
    return rows


def rank_main(sizes: list[int], calls: int, configs: list[str]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from perftests.kernels.oneshot_allreduce import OneShotQuantizedAllReduce, programs_for
    from perftests.kernels.quant import QBLOCK
    from perftests.support.nccl_cases import inputs, setup, teardown
    from speedgate.hardware import detect

    rank, world, device = setup()
    try:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        rows: list[dict[str, Any]] = []
        for size_mb in sizes:
            numel = size_mb * 2**20 // 2
            wire = numel + numel // 1024 * 4
            x = inputs(numel, rank, device)
            out = torch.empty_like(x)
            scratch = x.clone()
            row: dict[str, Any] = {"size_mb": size_mb, "wire_bytes": wire,
                                   "nccl_ms": median_ms(torch, dist, lambda s=scratch: dist.all_reduce(s), calls),
                                   "ceilings": _ceilings(torch, dist, symm_mem, rank, wire, sms, calls, device),
                                   "forms": []}
            for text in configs:
                rows_, warps, waves, frac = (float(v) for v in text.split(":"))
                programs = programs_for(numel // QBLOCK, int(rows_), sms)
                senders = max(1, min(programs - 1, round(frac * programs)))
                form = OneShotQuantizedAllReduce(numel, world, device, rows=int(rows_), warps=int(warps), waves=int(waves),
                                                 senders=senders)
                # A first call compiles, and one rank may compile seconds after the other: both ranks in step before
                # the checked and timed calls, and the error word of that first call cleared.
                form(x, out)
                torch.cuda.synchronize()
                dist.barrier()
                form.state[2].zero_()
                row["forms"].append({"rows": int(rows_), "warps": int(warps), "waves": int(waves), "senders": senders,
                                     "programs": form.programs,
                                     **measure_form(torch, dist, form, x, out, calls, row["nccl_ms"], wire)})
                del form
            torch.cuda.empty_cache()
            rows.append(row)
        fp = detect(None)
        return {"rank": rank, "card": rank_card(device), "key": fp.key, "sms": sms, "rows": rows}
    finally:
        teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--configs", nargs="+", default=CONFIGS, help="rows:warps:waves:senders-fraction each")
    args = parser.parse_args()
    results, cards = on_two_ranks("lab.oneshot_forms:rank_main", {"sizes": args.sizes, "calls": args.calls,
                                                                  "configs": args.configs},
                                  args.out, "oneshot_forms.json", timeout_s=500)
    for row in results[0]["rows"]:
        print(f"{row['size_mb']} MB on {results[0]['key']} ({cards}), wire {row['wire_bytes'] / 1e6:.1f} MB: "
              f"NCCL bf16 {row['nccl_ms']:.3f} ms")
        for c in row["ceilings"]:
            print(f"  {c['how']:8} {c.get('config', ''):7} {c['ms']:.3f} ms  {c['gbps']:.0f} GB/s")
        for f in sorted(row["forms"], key=lambda f: f["ms"]):
            info = ", ".join(f"{k} {f[k]}" for k in ("rows", "warps", "waves", "senders", "programs"))
            print(f"  {info}: {f['ms']:.3f} ms, {f['speedup']:.3f}x NCCL, {f['link_gbps']:.0f} GB/s, error/bound "
                  f"{f['error_over_bound']:.3f}, identical {f['identical']}, spun out {f['spun_out']}")


if __name__ == "__main__":
    main()
