"""Graph breaks (the chapter's examples) and their fixes: counted with torch._dynamo.explain, gated, and timed.

Each pair is an eager module with a graph break and its fixed form, which computes the same function:
- a print() in forward, fixed by guarding the side effect with torch.compiler.is_compiling();
- data-dependent branching on a tensor's value, fixed with torch.where, and with torch.cond.
The break counts are asserted (broken >= 1, fixed == 0) and gated as metrics with zero tolerance; the compiled
fixed form is timed against the compiled broken one (GPU).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perftests.support.inputs import generator

# The comparison is the break's cost, not a per-process pick of inductor's: each compile gives a pointwise kernel the
# one config its heuristics choose (one_pointwise_config). Autotuned, every pair's sides drew their own configs in
# each process, and each pick then held the evidence of a card or two (docs/results/gate-study-h200.md).
pytestmark = [pytest.mark.compile, pytest.mark.usefixtures("one_pointwise_config")]


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)


class PrintInForward(_Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        print("hidden", tuple(h.shape))  # a side effect dynamo cannot trace: the graph breaks here
        return self.down(h)


class GuardedPrint(_Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        if not torch.compiler.is_compiling():  # the side effect stays in eager runs only
            print("hidden", tuple(h.shape))
        return self.down(h)


class DataDependentBranch(_Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        if h.mean() > 0.5:  # Python control flow on a tensor's value: a device sync and a graph break
            h = h * 2.0
        else:
            h = h * 0.5
        return self.down(h)


class WhereBranch(_Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        return self.down(torch.where(h.mean() > 0.5, h * 2.0, h * 0.5))


class CondBranch(_Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        h = torch.cond(h.mean() > 0.5, lambda t: t * 2.0, lambda t: t * 0.5, (h,))
        return self.down(h)


PAIRS = {
    "print": (PrintInForward, GuardedPrint),
    "branch_where": (DataDependentBranch, WhereBranch),
    "branch_cond": (DataDependentBranch, CondBranch),
}


def graph_breaks(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(graphs, graph breaks) that dynamo produces for model(x)."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(x)
    return explanation.graph_count, explanation.graph_break_count


@pytest.mark.parametrize("pair", list(PAIRS))
def test_graph_break_fix(perf, device: str, pair: str) -> None:
    width, rows, dtype = (1024, 256, torch.bfloat16) if device == "cuda" else (32, 8, torch.float32)
    broken_cls, fixed_cls = PAIRS[pair]
    broken = broken_cls(width).to(device=device, dtype=dtype).eval()
    fixed = fixed_cls(width).to(device=device, dtype=dtype).eval()
    fixed.load_state_dict(broken.state_dict())  # the same weights: the same function
    # An input set is a batch of activations (the same shape every seed: no recompile). The branch pairs' condition,
    # mean(relu(up(x))) > 0.5, is a mean over every element, the same side of 0.5 for every set of one case.
    make = lambda seed: (torch.randn(rows, width, generator=generator(device, seed), device=device, dtype=dtype),)  # noqa: E731
    (x,) = make(0)

    with torch.no_grad():
        perf.assert_close(fixed(x), broken(x))
        _, broken_breaks = graph_breaks(broken, x)
        fixed_graphs, fixed_breaks = graph_breaks(fixed, x)
    assert broken_breaks >= 1, f"{broken_cls.__name__} was meant to break the graph; dynamo found no break"
    assert (fixed_graphs, fixed_breaks) == (1, 0), f"{fixed_cls.__name__}: {fixed_graphs} graphs, {fixed_breaks} breaks"
    perf.metric("graph_breaks_broken", broken_breaks, tolerance=0.0, direction="lower")
    perf.metric("graph_breaks_fixed", fixed_breaks, tolerance=0.0, direction="lower")

    torch._dynamo.reset()
    from torch._inductor import config as inductor_config

    assert inductor_config.triton.autotune_pointwise is False, "each pointwise kernel's one config: one_pointwise_config"
    compiled_broken = torch.compile(broken)
    compiled_fixed = torch.compile(fixed, fullgraph=True)  # fullgraph: a break would raise, not fall back

    def run(model: nn.Module):
        def call(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return model(x)

        return call

    # What a graph break costs is largely host work (back to Python between two graphs, a second launch): timed
    # from an idle device, host work included (docs/results/kernel-comments.md, "Test files").
    perf.compare(run(compiled_broken), run(compiled_fixed), name="compiled_fixed_vs_compiled_broken", latency=True,
                 inputs=make)
