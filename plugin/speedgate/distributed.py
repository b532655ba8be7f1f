"""Timing inside the ranks of a multi-process case (see speedgate.launch): the gate's interleaved rounds, with
every rank timing each call and the slowest rank's time kept per call.

Call measure_across_ranks(reference, optimized) on every rank after torch.distributed is initialized. Each call is
preceded by a barrier, so the ranks start together; each rank times it (CUDA events on the GPU, perf_counter on the
CPU); the per-call times are reduced with MAX across ranks, so a sample is the collective's time as its slowest
member saw it. Rank 0 decides when to stop (interval narrow enough, or the time budget spent) and broadcasts it.
Returns, on every rank, the samples and first-call times that Perf.compare_samples gates.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .measure import Policy
from .stats import bootstrap_ratio

BATCH = 10


def timed_on_rank(fn: Callable[[], Any]) -> float:
    """Milliseconds of one call of fn on this rank, started right after a barrier of all ranks (CUDA events on the
    GPU under NCCL, perf_counter otherwise)."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if _on_gpu():
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def slowest(values: list[float]) -> list[float]:
    """Element by element, the largest of every rank's values (an all-reduce with MAX)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def _on_gpu() -> bool:
    import torch
    import torch.distributed as dist

    return torch.cuda.is_available() and dist.get_backend() == "nccl"


def _device() -> Any:
    """Where this rank's collectives' tensors live: its GPU under NCCL, else the CPU."""
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if _on_gpu() else torch.device("cpu")


def measure_across_ranks(
    reference: Callable[[], Any],
    optimized: Callable[[], Any],
    *,
    budget_s: float = Policy.budget_s,
    target_noise: float = Policy.target_rel_halfwidth,
    min_rounds: int = Policy.min_rounds,
    max_rounds: int = 400,
    warmup_calls: int = Policy.warmup_calls,
) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    cuda = _on_gpu()
    first = slowest([timed_on_rank(reference), timed_on_rank(optimized)])
    for _ in range(warmup_calls):
        timed_on_rank(reference)
        timed_on_rank(optimized)
    ref_samples: list[float] = []
    opt_samples: list[float] = []
    stopped_by = "max-rounds"
    started = time.monotonic()
    while len(ref_samples) < max_rounds:
        local: list[float] = []
        for i in range(BATCH):
            ab = (len(ref_samples) + i) % 2 == 0
            pair = (reference, optimized) if ab else (optimized, reference)
            a, b = timed_on_rank(pair[0]), timed_on_rank(pair[1])
            local.extend([a, b] if ab else [b, a])  # always (reference, optimized)
        merged = slowest(local)
        ref_samples.extend(merged[0::2])
        opt_samples.extend(merged[1::2])
        decision = 0
        if dist.get_rank() == 0 and len(ref_samples) >= min_rounds:
            estimate = bootstrap_ratio(ref_samples, opt_samples, resamples=400)
            if estimate.rel_halfwidth <= target_noise:
                decision = 1
            elif time.monotonic() - started >= budget_s:
                decision = 2
        flag = torch.tensor([decision], dtype=torch.int32, device=_device())
        dist.broadcast(flag, src=0)
        if int(flag.item()):
            stopped_by = "converged" if int(flag.item()) == 1 else "budget"
            break
    return {
        "reference_ms": ref_samples,
        "optimized_ms": opt_samples,
        "reference_first_ms": first[0],
        "optimized_first_ms": first[1],
        "seconds": time.monotonic() - started,
        "stopped_by": stopped_by,
        "timer": "cuda-events-slowest-rank" if cuda else "perf-counter-slowest-rank",
    }
