"""The multi-GPU cases' bodies, run inside the ranks that speedgate.launch.run_ranks starts (one process per GPU,
NCCL): process-group setup, inputs, the error check, and one function per case that test_nccl.py names as its target.
The algorithms they run are in perftests/kernels/allreduce.py.

Error bound of the quantized all-reduce, element by element, against an fp32 all-reduce of the same bf16 inputs:
each rank's input is off by at most half its block's scale (a_r / 254, a_r = the block's max |x_r|); the
requantized sum is off by at most half of its own scale (<= (A + sum_r a_r / 254) / 254, A = the exact sum's block
max); the bf16 output rounds once more (<= 2^-9 of the value, which is within the exact value plus the two errors
above); fp32 arithmetic in the kernels (the reciprocal, the products, the sum) adds relative errors near 2^-24 of the
block's scales. The check asserts, on every element,
    |y - y_fp32| <= (E1 + E2) (1 + 2^-8) + 2^-8 |y_fp32| + 1e-5 (sum_r a_r + A),  E1 = sum_r a_r / 254,
    E2 = (A + E1) / 254.
It is a worst case: E1 and E2 are sums of maxima of rounding errors, so over millions of elements the largest
error comes within a few percent of it (on the CPU, 32k elements: 0.96 of the bound).

Timing: the case functions run on every rank under speedgate.distributed.measure_across_ranks (the slowest
rank's time per call), held: the devices' work alone, the hosts running ahead (held=False: every call from idle, a
barrier of the hosts before each, as the lab compares).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from perftests.kernels import quant
from perftests.kernels.allreduce import (
    Buckets,
    P2PQuantizedAllReduce,
    QuantizedAllReduce,
)
from perftests.kernels.oneshot_allreduce import OneShotQuantizedAllReduce

# Keep NVLink multicast off (the GPU machines' rule; NCCL would otherwise try NVLS on H100/H200 systems).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def setup() -> tuple[int, int, torch.device]:
    """Join the process group this rank was started for (NCCL on GPUs, gloo on the CPU): (rank, world, device)."""
    for name, value in SAFE_ENV.items():
        os.environ.setdefault(name, value)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return rank, world, device


def teardown() -> None:
    """Leave the process group once every rank is done with it."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def error_check(x: torch.Tensor, y: torch.Tensor, requantized: bool = True) -> dict[str, float]:
    """The quantized result y against an fp32 all-reduce of x, with the bound of the module's docstring (without its
    E2 for the one-shot form, which sums the dequantized inputs and never requantizes)."""
    exact = x.float().clone()
    dist.all_reduce(exact)
    amax_ranks = x.float().reshape(-1, quant.QBLOCK).abs().amax(dim=1)
    dist.all_reduce(amax_ranks)  # sum over ranks of each block's max |x_r|
    big_a = exact.reshape(-1, quant.QBLOCK).abs().amax(dim=1)
    e1 = amax_ranks / 254.0
    e2 = (big_a + e1) / 254.0 if requantized else torch.zeros_like(e1)
    per_block = (e1 + e2) * (1.0 + 2.0**-8) + 1e-5 * (amax_ranks + big_a)
    bound = per_block[:, None] + 2.0**-8 * exact.reshape(-1, quant.QBLOCK).abs()
    err = (y.float() - exact).abs().reshape(-1, quant.QBLOCK)
    excess = float((err / bound).max())
    rel_l2 = float(torch.linalg.vector_norm(y.float() - exact) / torch.linalg.vector_norm(exact))
    finite = bool(torch.isfinite(y).all())
    return {"max_error_over_bound": excess, "rel_l2": rel_l2, "max_abs_error": float(err.max()), "finite": finite}


def inputs(numel: int, rank: int, device: torch.device) -> torch.Tensor:
    """This rank's bf16 tensor to all-reduce, the same in every run."""
    g = torch.Generator(device=device).manual_seed(1234 + rank)
    # Gradient-like: mostly small, a few larger values per block, a different scale per rank.
    return (torch.randn(numel, generator=g, device=device) * (1.0 + rank)).to(torch.bfloat16)


def allreduce_case(numel: int, variant: str, pieces: int = 4, check: bool = True, timing: bool = True,
                   policy: dict[str, Any] | None = None, config: dict[str, int] | None = None,
                   held: bool = True) -> dict[str, Any]:
    """variant 'quantized': quantized vs NCCL bf16; 'pipelined': pipelined quantized vs quantized (one piece);
    'p2p': the copy-engine form (P2PQuantizedAllReduce, in `pieces`) vs NCCL bf16; 'oneshot': the one-shot kernel
    (OneShotQuantizedAllReduce, its tile and waves in config) vs NCCL bf16. held: measure_across_ranks's (False: every
    call from idle, as the lab compares)."""
    from speedgate.distributed import measure_across_ranks

    rank, world, device = setup()
    try:
        x = inputs(numel, rank, device)
        one = QuantizedAllReduce(numel, world, device, pieces=1)
        if variant == "oneshot":
            many: Any = OneShotQuantizedAllReduce(numel, world, device, **(config or {}))
        else:
            many = (P2PQuantizedAllReduce if variant == "p2p" else QuantizedAllReduce)(numel, world, device, pieces=pieces)
        out = torch.empty_like(x)
        result: dict[str, Any] = {"world": world, "numel": numel}
        if check:
            result["quantized"] = error_check(x, one(x, out))
            label = {"p2p": "p2p", "oneshot": "oneshot"}.get(variant, "pipelined")
            result[label] = error_check(x, many(x, out), requantized=variant != "oneshot")
            if variant == "oneshot":
                result["ranks_identical"] = _identical_on_ranks(out)
        if timing:
            if variant == "pipelined":
                reference: Callable[[], Any] = lambda: one(x, out)  # noqa: E731
            else:  # against NCCL's bf16 all-reduce
                scratch = x.clone()  # all-reduced in place every call: its values grow, NCCL's speed does not care
                reference = lambda: dist.all_reduce(scratch)  # noqa: E731
            chosen = one if variant == "quantized" else many
            optimized: Callable[[], Any] = lambda: chosen(x, out)  # noqa: E731
            result["samples"] = measure_across_ranks(reference, optimized, policy=policy, held=held)
        return result
    finally:
        teardown()


def _identical_on_ranks(y: torch.Tensor) -> bool:
    """Whether every rank holds the same bits in y (one all-gather of each rank's copy of y's bits)."""
    bits = y.contiguous().view(torch.uint8)  # NCCL gathers bytes, not int16
    gathered = [torch.empty_like(bits) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, bits)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def stress_case(numel: int, calls: int = 1000, graph_calls: int = 8, replays: int = 25,
                config: dict[str, int] | None = None, check: bool = True, timing: bool = False,
                policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one-shot kernel called back to back, `calls` times, on inputs that change every call, with no
    synchronisation between calls on either rank (so one rank may run a call ahead); then `graph_calls` calls
    captured in one CUDA graph and replayed `replays` times, the inputs refilled in place between replays. Every
    call's output is checked on the device against the fp32 sum of both ranks' inputs (each rank draws both
    inputs from seeds, so no communication orders the calls) with the one-shot bound, and the bits of every output
    are summed into a checksum that both ranks must share. Returns the largest error over its bound, the
    checksums' agreement and whether a wait spun out."""
    rank, world, device = setup()
    try:
        allreduce = OneShotQuantizedAllReduce(numel, world, device, **(config or {}))
        worst = torch.zeros((), device=device)
        checksum = torch.zeros((), dtype=torch.int64, device=device)
        gens = [torch.Generator(device=device).manual_seed(7 + r) for r in range(world)]
        pool = [torch.empty(numel, dtype=torch.bfloat16, device=device) for _ in range(world)]
        out = torch.empty(numel, dtype=torch.bfloat16, device=device)

        def draw(into: list[torch.Tensor], call: int) -> None:
            for r in range(world):  # every rank draws every rank's input: rank r's own is pool[r]
                into[r].copy_((torch.randn(numel, generator=gens[r], device=device) * (1.0 + r + call % 3)).to(torch.bfloat16))

        def account(inputs_: list[torch.Tensor], y: torch.Tensor, call: int) -> None:
            nonlocal worst, checksum
            exact = sum(t.float() for t in inputs_)
            amax = sum(t.float().reshape(-1, quant.QBLOCK).abs().amax(dim=1) for t in inputs_)
            bound = (amax / 254.0 * (1.0 + 2.0**-8) + 1e-5 * amax)[:, None] + 2.0**-8 * exact.reshape(-1, quant.QBLOCK).abs()
            ratio = ((y.float() - exact).abs().reshape(-1, quant.QBLOCK) / bound).amax()
            worst = torch.maximum(worst, torch.nan_to_num(ratio, nan=float("inf")))
            checksum = checksum + y.view(torch.int16).to(torch.int64).sum() * (call + 1)

        for call in range(calls):
            draw(pool, call)
            allreduce(pool[rank], out)
            account(pool, out, call)
        # A CUDA graph of graph_calls calls on graph_calls input sets (this rank's own copies), replayed.
        sets = [[torch.empty_like(out) for _ in range(world)] for _ in range(graph_calls)]
        outs = [torch.empty_like(out) for _ in range(graph_calls)]
        for k in range(graph_calls):
            draw(sets[k], calls + k)
        torch.cuda.synchronize(device)
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # two calls before capture, on every rank: the epochs stay in step
            for k in range(2):
                allreduce(sets[k][rank], outs[k])
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for k in range(graph_calls):
                allreduce(sets[k][rank], outs[k])
        for replay in range(replays):
            for k in range(graph_calls):
                draw(sets[k], calls + graph_calls * (replay + 1) + k)
            graph.replay()
            for k in range(graph_calls):
                account(sets[k], outs[k], calls + graph_calls * (replay + 1) + k)
        torch.cuda.synchronize(device)
        sums = [torch.zeros_like(checksum) for _ in range(world)]
        dist.all_gather(sums, checksum)
        return {"world": world, "numel": numel, "calls": calls + replays * graph_calls,
                "max_error_over_bound": float(worst), "checksums_equal": all(bool(s == sums[0]) for s in sums),
                "spun_out": allreduce.failed()}
    finally:
        teardown()


def overlap_case(width: int, layers: int, tokens: int, bucket_mb: int = 25, check: bool = True, timing: bool = True,
                 policy: dict[str, Any] | None = None, held: bool = True) -> dict[str, Any]:
    """One data-parallel backward: all-reduce of each bucket as soon as backward fills it, against all buckets
    all-reduced after backward (the same buckets, the same bytes). Nothing in a step waits on the host (a bucket's
    work.wait() only orders the streams), so it can be timed held."""
    from speedgate.distributed import measure_across_ranks

    rank, world, device = setup()
    try:
        torch.manual_seed(0)  # the same weights on every rank
        layers_list: list[torch.nn.Module] = []
        for _ in range(layers):
            layers_list += [torch.nn.Linear(width, width, bias=False), torch.nn.GELU()]
        model = torch.nn.Sequential(*layers_list).to(device=device, dtype=torch.bfloat16)
        params = list(model.parameters())
        buckets = Buckets(params, bucket_mb * 2**20)
        g = torch.Generator(device=device).manual_seed(99 + rank)  # each rank its own data
        x = torch.randn(tokens, width, generator=g, device=device, dtype=torch.bfloat16)

        def step(overlap: bool) -> None:
            buckets.overlap = overlap
            buckets.zero()
            model(x).float().square().mean().backward()
            buckets.finish()

        result: dict[str, Any] = {"world": world, "buckets": len(buckets.buckets),
                                  "gradient_bytes": sum(p.numel() * p.element_size() for p in params)}
        if check:
            step(False)
            after = [p.grad.detach().clone() for p in params]
            step(True)
            same = all(torch.equal(a, p.grad) for a, p in zip(after, params))
            # and the gradients are the all-reduced ones: a second rank's data changed them
            local = [p.grad.detach().clone() for p in params]
            result["overlapped_equals_after"] = same
            result["reduced"] = world > 1 and not all(torch.equal(a, b) for a, b in zip(local, _local_grads(model, x, params)))
        if timing:
            result["samples"] = measure_across_ranks(lambda: step(False), lambda: step(True), policy=policy, held=held)
        return result
    finally:
        teardown()


def _local_grads(model: torch.nn.Module, x: torch.Tensor, params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    grads = torch.autograd.grad(model(x).float().square().mean(), params)
    return [g.detach() for g in grads]
