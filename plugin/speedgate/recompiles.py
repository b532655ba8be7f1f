"""The guard that a comparison's timed rounds compiled nothing: torch.compile's frames and graphs counted around them
(dynamo's counters, never importing torch)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


class RecompiledInRounds(AssertionError):
    """torch.compile compiled again while a comparison was being timed: the samples hold compile time."""


def compiled_frames() -> int:
    """Frames torch.compile (dynamo) has compiled in this process, a recompilation counting again; 0 when dynamo
    was never imported. Never imports torch."""
    utils = sys.modules.get("torch._dynamo.utils")
    return 0 if utils is None else int(utils.counters["frames"]["total"])


def _compile_counts() -> tuple[int, int]:
    """(frames, graphs) dynamo has compiled in this process: a fullgraph=True compile counts a graph and no frame
    (torch 2.13), a plain one both."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0, 0
    return int(utils.counters["frames"]["total"]), int(utils.counters["stats"]["unique_graphs"])


@contextlib.contextmanager
def no_recompile(case_id: str) -> Iterator[None]:
    """Around the timed rounds: fails the case if torch.compile compiled anything meanwhile."""
    frames, graphs = _compile_counts()
    yield
    frames_after, graphs_after = _compile_counts()
    compiled = max(frames_after - frames, graphs_after - graphs)
    if compiled:
        raise RecompiledInRounds(
            f"speedgate: {case_id}: torch.compile compiled {compiled} frame(s) during the timed rounds (frames, or graphs "
            "under fullgraph=True: a recompilation; a guard failed, e.g. a new shape, dtype or Python value); the samples include "
            "compile time. Make the inputs static across calls, or mark dimensions dynamic.")


__all__ = ["RecompiledInRounds", "compiled_frames", "no_recompile"]
