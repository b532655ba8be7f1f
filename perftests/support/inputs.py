"""Input sets for perf.compare(..., inputs=make): the generator each set draws from, and graphed or bound cases' one
set, with the reason it stays fixed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

# The plugin's name for the check a case on fixed inputs waives (speedgate.pipeline.FIXED_INPUTS_WAIVER): with
# --speedgate-strict, a case checked on zero-argument sides fails unless it says why it cannot rotate input sets.
FIXED_INPUTS = "fixed-inputs"
GRAPH_REPLAYS = ("graph=True: timed as CUDA graph replays, and a graph replays the input tensors it captured, so the "
                 "sides cannot rotate or refill input sets")


def generator(device: str, seed: int) -> torch.Generator:
    """The generator of input set `seed` in the running test: the test's own seed (the root conftest seeds torch
    with the run's seed mixed with the node id) plus the set's, so every run draws fresh data, every set of a case
    differs, and SPEEDGATE_SEED replays a failure."""
    return torch.Generator(device=device).manual_seed((torch.initial_seed() + seed) % 2**63)


def fixed_inputs(reason: str, waive: Mapping[str, str] | None = None) -> dict[str, str]:
    """waive= for a case whose sides are zero-argument: the fixed-inputs waiver with its reason, beside the case's
    other waivers."""
    return {**(waive or {}), FIXED_INPUTS: reason}


def compare_on_inputs(
    perf: Any,
    reference: Callable[..., Any],
    optimized: Callable[..., Any],
    make: Callable[[int], Sequence[Any]],
    *,
    graph: bool = False,
    bind: str = "",
    waive: Mapping[str, str] | None = None,
    own_set: bool = False,
    **kwargs: Any,
) -> Any:
    """perf.compare(reference, optimized, inputs=make, **kwargs). With graph=True, or bind='why' (the reason, in
    words), the sides are bound to set 0 as zero-argument callables instead, and the case waives fresh inputs with
    that reason: a CUDA graph replays the inputs it captured, it cannot rotate them. own_set=True binds each side to
    a set 0 of its own (make(0) called for each: the same values in other tensors), for a side that marks the
    tensors it is given (torch._dynamo.mark_dynamic), which the other side must not see."""
    if graph or bind:
        args = tuple(make(0))
        other = tuple(make(0)) if own_set else args
        return perf.compare(lambda: reference(*args), lambda: optimized(*other), graph=graph,
                            waive=fixed_inputs(bind or GRAPH_REPLAYS, waive), **kwargs)
    return perf.compare(reference, optimized, inputs=make, waive=waive, **kwargs)
