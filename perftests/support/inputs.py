"""Input sets for perf.compare(..., inputs=make): the generator each set draws from, and graphed cases' one set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def generator(device: str, seed: int) -> torch.Generator:
    """The generator of input set `seed` in the running test: the test's own seed (the root conftest seeds torch
    with the run's seed mixed with the node id) plus the set's, so every run draws fresh data, every set of a case
    differs, and SPEEDGATE_SEED replays a failure."""
    return torch.Generator(device=device).manual_seed((torch.initial_seed() + seed) % 2**63)


def compare_on_inputs(
    perf: Any,
    reference: Callable[..., Any],
    optimized: Callable[..., Any],
    make: Callable[[int], Sequence[Any]],
    *,
    graph: bool = False,
    bind: bool = False,
    **kwargs: Any,
) -> Any:
    """perf.compare(reference, optimized, inputs=make, **kwargs); with graph=True or bind=True, the sides bound to
    set 0 as zero-argument callables instead: a CUDA graph replays the inputs it captured, it cannot rotate them."""
    if graph or bind:
        args = tuple(make(0))
        return perf.compare(lambda: reference(*args), lambda: optimized(*args), graph=graph, **kwargs)
    return perf.compare(reference, optimized, inputs=make, **kwargs)
