"""Where the one-shot quantized all-reduce's time goes (issue 49), on 2 GPUs: the link's ceilings for SM stores and
loads to the peer beside the copy engines', then the suite's kernel against a form that splits its programs into
senders and reducers (perftests/kernels/oneshot_allreduce.py)

Usage: python -m lab.oneshot_forms OUT [--sizes 256 1024] [--calls 30]

Both ranks move data at once in every measurement, as the all-reduce does (both directions of the link busy), on
buffers the size of the all-reduce's wire bytes (int8 codes and fp32 scales):
  - ce_push / ce_pull: a copy into / out of the peer's symmetric-memory buffer on the copy engines;
  - sm_push / sm_pull: a Triton copy kernel doing the same with SM stores / loads;
  - hbm: the same copy kernel within the device (the local memory's ceiling for that traffic).
Then the one-shot kernel at the suite's config, and `split`: the same arithmetic with the first SENDERS programs only
quantizing and storing into the peer (a flag per wave), and the others only waiting and reducing, so the link is fed
by programs that never wait. Each form's result is checked against the bound and across the ranks (the same bits).
Each time is the median of `calls` calls between CUDA events, a barrier and a synchronise before each. Rank 0 prints
a table and writes OUT/oneshot_forms.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

from perftests.kernels.oneshot_allreduce import _add, _codes, _mul

# (label, grid as a multiple of the SM count, warps, int32 elements a program copies per step)
COPY_CONFIGS = [("1x-16w", 1, 16, 8192)]
# split forms: (senders as a fraction of the programs, rows, warps, waves, programs as a multiple of the SM count)
SPLIT_CONFIGS = [(0.5, 16, 16, 8, 1), (0.5, 32, 16, 8, 1), (0.5, 16, 8, 8, 2), (0.5, 32, 16, 16, 1), (0.5, 8, 8, 8, 2),
                 (0.5, 16, 16, 4, 1)]
LAB_SPINS = 1 << 22  # a few seconds: a wait that never ends (a wrong form) costs seconds, not the call


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=ok), mask=ok)


@triton.jit
def _split_kernel(x_ptr, out_ptr, peer_codes_ptr, peer_scales_ptr, peer_flags_ptr, codes_ptr, scales_ptr, flags_ptr,
                  state_ptr, n_blocks, SLOT_CODES, SLOT_SCALES, SENDERS, RANK: tl.constexpr, QBLOCK: tl.constexpr,
                  ROWS: tl.constexpr, WAVES: tl.constexpr, MAX_SPINS: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    epoch = tl.load(state_ptr) + 1
    slot = (epoch % 2).to(tl.int64)
    n_chunks = tl.cdiv(n_blocks, ROWS)
    cols = tl.arange(0, QBLOCK)
    if pid < SENDERS:
        # sender pid: chunks pid, pid + SENDERS, ...; a flag per wave in the peer's memory
        iters = tl.cdiv(n_chunks - pid, SENDERS)
        per_wave = tl.cdiv(iters, WAVES)
        for w in tl.static_range(WAVES):
            for i in range(w * per_wave, tl.minimum((w + 1) * per_wave, iters)):
                rows = (pid + i * SENDERS) * ROWS + tl.arange(0, ROWS)
                row_ok = rows < n_blocks
                code, scale = _codes(x_ptr, rows, row_ok, QBLOCK)
                at = slot * SLOT_CODES + rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :]
                tl.store(peer_codes_ptr + at, code.to(tl.int8), mask=row_ok[:, None])
                tl.store(peer_scales_ptr + slot * SLOT_SCALES + rows, scale, mask=row_ok)
            tl.debug_barrier()
            tl.atomic_xchg(peer_flags_ptr + pid * WAVES + w, epoch, sem="release", scope="sys")
    else:
        # reducer r: the chunks of senders r, r + reducers, ..., wave by wave as their flags come
        reducers = programs - SENDERS
        spins = 0
        for s in range(pid - SENDERS, SENDERS, reducers):
            iters = tl.cdiv(n_chunks - s, SENDERS)
            per_wave = tl.cdiv(iters, WAVES)
            for w in range(WAVES):
                flag = flags_ptr + s * WAVES + w
                seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
                while (seen < epoch) & (spins < MAX_SPINS):
                    seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
                    spins += 1
                if seen < epoch:
                    tl.atomic_xchg(state_ptr + 2, -1, sem="relaxed", scope="gpu")
                for i in range(w * per_wave, tl.minimum((w + 1) * per_wave, iters)):
                    rows = (s + i * SENDERS) * ROWS + tl.arange(0, ROWS)
                    row_ok = rows < n_blocks
                    code, scale = _codes(x_ptr, rows, row_ok, QBLOCK)
                    at = rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :]
                    peer = tl.load(codes_ptr + slot * SLOT_CODES + at, mask=row_ok[:, None], other=0).to(tl.float32)
                    peer_scale = tl.load(scales_ptr + slot * SLOT_SCALES + rows, mask=row_ok, other=0.0)
                    mine = _mul(code, tl.broadcast_to(scale[:, None], code.shape))
                    theirs = _mul(peer, tl.broadcast_to(peer_scale[:, None], peer.shape))
                    if RANK == 0:
                        total = _add(mine, theirs)
                    else:
                        total = _add(theirs, mine)
                    tl.store(out_ptr + at, total.to(tl.bfloat16), mask=row_ok[:, None])
    done = tl.atomic_add(state_ptr + 1, 1, sem="acq_rel", scope="gpu")
    if done == programs - 1:
        tl.store(state_ptr + 1, 0)
        tl.store(state_ptr, epoch)


def _median_ms(torch: Any, dist: Any, fn: Any, calls: int) -> float:
    for _ in range(3):
        fn()
    times = []
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


def _ceilings(torch: Any, dist: Any, symm_mem: Any, rank: int, wire: int, sms: int, calls: int,
              device: Any) -> list[dict[str, Any]]:
    words = wire // 4
    sym = symm_mem.empty(words, dtype=torch.int32, device=device)
    handle = symm_mem.rendezvous(sym, dist.group.WORLD.group_name)
    peer = handle.get_buffer(1 - rank, (words,), torch.int32)
    local = torch.zeros(words, dtype=torch.int32, device=device)
    other = torch.zeros(words, dtype=torch.int32, device=device)
    rows: list[dict[str, Any]] = [
        {"how": "ce_push", "ms": _median_ms(torch, dist, lambda p=peer, d=local: p.copy_(d), calls)},
        {"how": "ce_pull", "ms": _median_ms(torch, dist, lambda p=peer, d=local: d.copy_(p), calls)}]
    for label, mult, warps, block in COPY_CONFIGS:
        grid = (mult * sms,)
        for how, src, dst in (("sm_push", local, peer), ("sm_pull", peer, local), ("hbm", local, other)):
            def run(src=src, dst=dst, grid=grid, warps=warps, block=block) -> None:
                _copy_kernel[grid](src, dst, words, BLOCK=block, num_warps=warps)
            rows.append({"how": how, "config": label, "ms": _median_ms(torch, dist, run, calls)})
    for row in rows:
        row["gbps"] = wire / row["ms"] / 1e6
    return rows


def _split_call(allreduce: Any, programs: int, senders: int, spins: int) -> Any:
    from perftests.kernels.quant import QBLOCK

    def call(x: Any, out: Any) -> Any:
        (codes, scales, flags), (peer_codes, peer_scales, peer_flags) = allreduce.mine, allreduce.peer
        _split_kernel[(programs,)](
            x, out, peer_codes, peer_scales, peer_flags, codes, scales, flags, allreduce.state, allreduce.n_blocks,
            allreduce.numel, allreduce.n_blocks, senders, RANK=allreduce.rank, QBLOCK=QBLOCK, ROWS=allreduce.rows,
            WAVES=allreduce.waves, MAX_SPINS=spins, num_warps=allreduce.warps)
        return out
    return call


def rank_main(sizes: list[int], calls: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from perftests.kernels.oneshot_allreduce import OneShotQuantizedAllReduce
    from perftests.support.nccl_cases import _identical_on_ranks, error_check, inputs, setup, teardown
    from perftests.test_nccl import ONESHOT_CONFIG
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
                                   "nccl_ms": _median_ms(torch, dist, lambda s=scratch: dist.all_reduce(s), calls),
                                   "ceilings": _ceilings(torch, dist, symm_mem, rank, wire, sms, calls, device),
                                   "forms": []}
            forms: list[tuple[dict[str, Any], Any]] = []
            suite = OneShotQuantizedAllReduce(numel, world, device, **ONESHOT_CONFIG)
            forms.append(({"form": "suite", **ONESHOT_CONFIG}, suite))
            for frac, rows_, warps, waves, mult in SPLIT_CONFIGS:
                # the flags are the base's (one per program and wave): at most base.programs senders
                base = OneShotQuantizedAllReduce(numel, world, device, rows=rows_, warps=warps, waves=waves)
                programs = mult * base.programs
                senders = max(1, min(base.programs, programs - 1, round(frac * programs)))
                forms.append(({"form": "split", "senders": senders, "programs": programs, "rows": rows_,
                               "warps": warps, "waves": waves}, (base, _split_call(base, programs, senders, LAB_SPINS))))
            for info, form in forms:
                owner, call = (form, form) if not isinstance(form, tuple) else form
                # A first call compiles, and one rank may compile seconds after the other: its peer's waits would
                # spin out (LAB_SPINS). So a first call, then both ranks in step and the error word cleared.
                call(x, out)
                torch.cuda.synchronize()
                dist.barrier()
                owner.state[2].zero_()
                error = error_check(x, call(x, out), requantized=False)
                same = _identical_on_ranks(out)
                ms = _median_ms(torch, dist, lambda c=call, x=x, out=out: c(x, out), calls)
                row["forms"].append({**info, "ms": ms, "speedup": row["nccl_ms"] / ms, "link_gbps": wire / ms / 1e6,
                                     "error_over_bound": error["max_error_over_bound"], "identical": same,
                                     "spun_out": owner.failed()})
            del forms, suite
            torch.cuda.empty_cache()
            rows.append(row)
        fp = detect(None)
        return {"rank": rank, "card": fp.card, "key": fp.key, "sms": sms, "rows": rows}
    finally:
        teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    from speedgate.launch import run_ranks

    results = run_ranks("lab.oneshot_forms:rank_main", 2, {"sizes": args.sizes, "calls": args.calls}, timeout_s=500)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "oneshot_forms.json").write_text(json.dumps(results))
    cards = ", ".join(r["card"] or "?" for r in results)
    for row in results[0]["rows"]:
        print(f"{row['size_mb']} MB on {results[0]['key']} ({cards}), wire {row['wire_bytes'] / 1e6:.1f} MB: "
              f"NCCL bf16 {row['nccl_ms']:.3f} ms")
        for c in row["ceilings"]:
            print(f"  {c['how']:8} {c.get('config', ''):7} {c['ms']:.3f} ms  {c['gbps']:.0f} GB/s")
        for f in sorted(row["forms"], key=lambda f: f["ms"]):
            info = ", ".join(f"{k} {f[k]}" for k in ("form", "senders", "programs", "rows", "warps", "waves") if k in f)
            print(f"  {info}: {f['ms']:.3f} ms, {f['speedup']:.3f}x NCCL, {f['link_gbps']:.0f} GB/s, error/bound "
                  f"{f['error_over_bound']:.3f}, identical {f['identical']}, spun out {f['spun_out']}")


if __name__ == "__main__":
    main()
