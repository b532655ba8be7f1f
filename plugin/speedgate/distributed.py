"""Timing inside the ranks of a multi-process case (see speedgate.launch): the gate's interleaved rounds, with
every rank timing each call and the slowest rank's time kept per call.

Call measure_across_ranks(reference, optimized) on every rank after torch.distributed is initialized. Each rank times
every call (CUDA events on the GPU, perf_counter on the CPU); the per-call times are reduced with MAX across ranks, so
a sample is the collective's time as its slowest member saw it. Two ways to start the calls together:
- from idle (the default): a barrier of the hosts before each call, which each host leaves at its own moment. A call
  then counts its host's launch, and a rank that starts first waits inside the collective for the later one: the
  hosts' skew is in the sample;
- held (held=True, on the GPU): the device held while the host queues a batch of calls (speedgate.timers.CudaTimer,
  the in-process clock, L2 flush included), then a small all-reduce that ends on every device at once (a
  rendezvous), then the batch back to back. A sample is the devices' work alone, with neither the launches nor the
  hosts' skew. A side that makes its host wait for the device is timed from idle, as in process.
Rank 0 decides when to stop (interval narrow enough, or the time budget spent) and broadcasts it.
Returns, on every rank, the samples and first-call times that Perf.compare_samples gates, the fraction of the
measurement's time that NVML saw each rank's GPU held down by the power cap and by heat (the worst rank's; an
in-process comparison reads its own GPU's the same way), and the Triton, Gluon and CUTLASS kernels each side's first
call launched on this rank, as codegen facts (speedgate.codegen: registers, spills, shared memory, warps, stages, the
PTX's mix; no launch shape, which only a profiler sees).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import codegen
from .measure import Policy, run_rounds


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


_POLICY_NAMES = ("power", "thermal")


def _violations_reader() -> Callable[[], dict[str, int]] | None:
    """This rank's GPU's NVML violation counters (cumulative ns per policy), or None off the GPU or without NVML."""
    if not _on_gpu():
        return None
    import torch

    from .gpu_state import open_monitor
    from .hardware import visible_gpu_tokens

    tokens, index = visible_gpu_tokens(), torch.cuda.current_device()
    monitor = open_monitor(tokens[index] if index < len(tokens) else str(index))
    return monitor.violations if monitor else None


def worst_throttling(fractions: Mapping[str, float]) -> dict[str, float]:
    """Per policy, the largest fraction any rank's GPU was held down (a MAX across ranks; every rank calls it)."""
    merged = slowest([float(fractions.get(name, -1.0)) for name in _POLICY_NAMES])
    return {name: value for name, value in zip(_POLICY_NAMES, merged) if value >= 0}


def _device() -> Any:
    """Where this rank's collectives' tensors live: its GPU under NCCL, else the CPU."""
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if _on_gpu() else torch.device("cpu")


# Rounds per batch across ranks: each round costs two barriers, and the stop decision one broadcast per batch.
BATCH = 10
# Rounds at most across ranks (each round's barriers make a round far costlier than in process).
MAX_ROUNDS = 400

_STOPS = ("", "converged", "budget")


# The timers' names, as the samples and the baseline entries carry them.
IDLE_TIMER = "cuda-events-slowest-rank"
HELD_TIMER = "cuda-events-held-slowest-rank"
HOST_TIMER = "perf-counter-slowest-rank"


def measure_across_ranks(
    reference: Callable[[], Any],
    optimized: Callable[[], Any],
    *,
    policy: Policy | Mapping[str, Any] | None = None,
    held: bool = False,
) -> dict[str, Any]:
    """The gate's interleaved rounds on every rank (the loop of speedgate.measure), each sample the slowest rank's.

    policy is the test's perf.policy (or its to_json(), as it arrives in a rank's payload); None: the defaults.
    held: time the devices' work alone (the module's docstring); the default starts each call from idle.
    """
    import torch
    import torch.distributed as dist

    if policy is None:
        policy = Policy()
    elif not isinstance(policy, Policy):
        policy = Policy.from_json(policy)
    policy = dataclasses.replace(policy, max_rounds=min(policy.max_rounds, MAX_ROUNDS))
    cuda = _on_gpu()
    violations = _violations_reader()
    before, started = (violations() if violations else {}), time.monotonic()
    # The first calls, where Triton compiles: each side's compiled kernels noted as they launch (no profiler runs here).
    first_reference, first_optimized, kernels = codegen.first_calls_facts(lambda: timed_on_rank(reference),
                                                                          lambda: timed_on_rank(optimized))
    first = slowest([first_reference, first_optimized])
    for _ in range(policy.warmup_calls):
        timed_on_rank(reference)
        timed_on_rank(optimized)

    timer = held_timer(reference, optimized) if held and cuda else None
    if timer is not None:
        # One batch untimed, which teaches each rank's hold how far its host falls behind: the first held batch
        # has only the margin's hold, and ranks drop no rounds (run_rounds), so its calls would stay in the samples.
        timer.time_each([reference, optimized] * BATCH, rendezvous=rendezvous)

    def take(first_round: int, count: int) -> tuple[list[float], list[float]]:
        order = [(reference, optimized) if i % 2 == 0 else (optimized, reference)
                 for i in range(first_round, first_round + count)]
        if timer is not None:
            times = timer.time_each([fn for pair in order for fn in pair], rendezvous=rendezvous)
            timed = list(zip(times[0::2], times[1::2]))
        else:
            timed = [(timed_on_rank(a), timed_on_rank(b)) for a, b in order]
        local: list[float] = []
        for i, (a, b) in zip(range(first_round, first_round + count), timed):
            local.extend([a, b] if i % 2 == 0 else [b, a])  # always (reference, optimized)
        merged = slowest(local)
        return merged[0::2], merged[1::2]

    def agree(decision: str | None) -> str | None:
        """Rank 0's decision, on every rank."""
        flag = torch.tensor([_STOPS.index(decision or "")], dtype=torch.int32, device=_device())
        dist.broadcast(flag, src=0)
        return _STOPS[int(flag.item())] or None

    rounds = run_rounds(take, policy, batch_size=lambda _ms: BATCH, per_pair_ms=sum(first),
                        decides=dist.get_rank() == 0, agree=agree)
    from .gpu_state import throttled_fractions

    mine = throttled_fractions(before, violations(), time.monotonic() - started) if violations else {}
    return {
        "throttled": worst_throttling(mine),
        "reference_ms": rounds.reference,
        "optimized_ms": rounds.optimized,
        "reference_first_ms": first[0],
        "optimized_first_ms": first[1],
        "seconds": rounds.seconds,
        "stats_seconds": rounds.stats_seconds,
        "stopped_by": rounds.stopped_by,
        "timer": HELD_TIMER if timer is not None else IDLE_TIMER if cuda else HOST_TIMER,
        **({"codegen": kernels} if kernels else {}),
    }


def held_timer(reference: Callable[[], Any], optimized: Callable[[], Any]) -> Any:
    """The in-process CUDA clock for held batches on this rank, or None (on every rank alike) when a side makes some
    rank's host wait for its device: no hold puts that host ahead, so those sides are timed from idle."""
    import torch

    from .timers.cuda import CudaTimer

    timer = CudaTimer(torch, lockstep=True)
    # for_sides: the one-GPU clock's own answer (itself, or an idle start when a side makes the host wait), agreed
    # across ranks so that every rank takes the same path and queues the same collectives (its probes too: lockstep).
    waits = slowest([float(timer.for_sides(reference, optimized) is not timer)])
    return None if any(waits) else timer


def rendezvous() -> None:
    """A one-element all-reduce: it ends on every rank's device at once, however late each rank queued it."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.zeros(1, device=_device()))
