"""Dynamic shapes over the chapter's sequence-length schedule (128, 256, 384, 512): static compiles (one per
shape), dynamic=True, mark_dynamic, and padding to buckets. Recompiles and compile seconds are gated as metrics;
the steady-state time of one pass over the schedule is compared against the static strategy's.

Padding is exact here: the model is causal, so tokens appended after position L change no logit before L.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from perftests.models.transformer import build, token_ids, workload
from perftests.support.compile_time import COMPILE_TIME_TOLERANCE, first_pass, schedule_pass
from perftests.support.tolerance import intermediate_rounding_atol

pytestmark = pytest.mark.compile

SCHEDULE = (128, 256, 384, 512)
BUCKETS = (256, 512)
STRATEGIES = ("dynamic", "mark_dynamic", "buckets")


def make_runner(strategy: str, model: torch.nn.Module, buckets: tuple[int, ...]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function of tokens (B, L) returning logits (B, L, V) under one shape strategy."""
    if strategy == "static":
        compiled = torch.compile(model, dynamic=False)
        return compiled
    if strategy == "dynamic":
        return torch.compile(model, dynamic=True)
    if strategy == "mark_dynamic":
        compiled = torch.compile(model)

        def run(tokens: torch.Tensor) -> torch.Tensor:
            torch._dynamo.mark_dynamic(tokens, 1)
            return compiled(tokens)

        return run
    if strategy == "buckets":
        compiled = torch.compile(model, dynamic=False)

        def run(tokens: torch.Tensor) -> torch.Tensor:
            length = tokens.shape[1]
            bucket = next(b for b in buckets if b >= length)
            padded = torch.nn.functional.pad(tokens, (0, bucket - length))
            return compiled(padded)[:, :length]

        return run
    raise ValueError(strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_dynamic_shapes(perf, device: str, strategy: str) -> None:
    cfg, batch, _, dtype = workload(device)
    model = build(cfg, device, dtype)
    # The CPU runs the same schedule at a sixteenth of the lengths.
    schedule = SCHEDULE if device == "cuda" else tuple(s // 16 for s in SCHEDULE)
    buckets = BUCKETS if device == "cuda" else tuple(b // 16 for b in BUCKETS)
    # An input set is one pass of the schedule: a batch of tokens per length (the same shapes every seed).
    make = lambda seed: token_ids(cfg, batch, schedule, device, seed)  # noqa: E731
    inputs = make(0)
    runners = {}
    compiles = {}
    seconds = {}
    for name in ("static", strategy):
        # Each strategy compiles from scratch (see first_pass): the model's forward is shared by all of them.
        runners[name] = make_runner(name, model, buckets)
        outputs, seconds[name], compiles[name] = first_pass(runners[name], inputs, device)
        with torch.no_grad():
            for tokens, out in zip(inputs, outputs):
                expected = model(tokens)
                tol = dict(rtol=1.6e-2 if dtype == torch.bfloat16 else 1.3e-6,
                           atol=intermediate_rounding_atol(expected, dtype, factor=2.0 * cfg.layers))
                perf.assert_close(out, expected, **tol)
    assert compiles["static"] == len(schedule), f"static: {compiles['static']} compiles for {len(schedule)} shapes"
    expected_compiles = len(buckets) if strategy == "buckets" else 2  # dynamic: a static first graph may precede
    assert compiles[strategy] <= expected_compiles, f"{strategy}: {compiles[strategy]} compiles"
    perf.metric(f"compiles_{strategy}", compiles[strategy], tolerance=0.0)
    perf.metric(f"compile_pass_s_{strategy}", seconds[strategy], tolerance=COMPILE_TIME_TOLERANCE, unit="s")
    perf.metric("compile_pass_s_static", seconds["static"], tolerance=COMPILE_TIME_TOLERANCE, unit="s")

    # Both strategies' graphs must live side by side for the comparison: compile both again (cache on: this
    # is not measured) before timing, so no compile falls inside the rounds.
    torch._dynamo.reset()
    for run in (runners["static"], runners[strategy]):
        schedule_pass(run)(*inputs)
    # A pass returns nothing (see schedule_pass); each strategy's outputs were checked against eager above.
    # A pass is launch-bound (guards, a graph per length): timed from an idle device, host work included
    # (docs/results/kernel-comments.md, "Test files").
    perf.compare(schedule_pass(runners["static"]), schedule_pass(runners[strategy]), name="steady_state_vs_static",
                 check=False, latency=True, inputs=make)
