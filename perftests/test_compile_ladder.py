"""The transformer optimization ladder (the chapter's 0_baseline .. 4_transformer_engine), one rung per case.

  0 fp32_manual      fp32 weights and math, attention written out (scores materialized), TF32 off
  1 tf32_bf16_amp    the same model with TF32 allowed and bf16 autocast: GEMMs on tensor cores (a precision change)
  2 sdpa             attention through scaled_dot_product_attention (a fused flash kernel) instead of by hand
  3 compile          torch.compile (default mode) of rung 2
  4 fp8_linear       rung 3 with every block's linear layer in e4m3 through torch._scaled_mm (Transformer Engine
                     is not available: see perftests/models/fp8.py); the LM head stays in bf16, as in TE recipes

Each rung is timed against the rung before it and against rung 0 (rung 1's previous is rung 0). Correctness is
checked against rung 0, the fp32 function, with a bound that fits the rung's precision (below), and against the
previous rung: elementwise where both sides have the same precision (2 -> 3), normwise where the precision changes.
Rungs 1 and 4 change precision: their speedups are the precision's, not a compiler's, and their names say so.

Error bounds (relative L2 of the logits against rung 0). Rounding both operands of a GEMM to a format with unit
roundoff u gives a relative error of RMS sqrt(2/3) u in its output (uniform rounding errors, independent terms).
Under autocast the residual stream stays fp32 and each block adds its branches to it, so the blocks' GEMM errors
arrive at the logits diluted; the head GEMM's rounding arrives whole. The bound is SAFETY = 3 times one GEMM's
worth at the rung's precision: bf16 (u = 2^-8) for rungs 1-3, e4m3 (u = 2^-4) for rung 4. Measured on the CPU
(2 blocks): 0.0031 against a bound of 0.0096 for the bf16 rungs (the head's rounding, as predicted), 0.016 against
0.153 for fp8: its head is bf16 and its e4m3 errors are all diluted, by a factor this estimate does not model, so
its bound is loose and catches gross faults (a wrong scale gives an error near 1), not subtle ones.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from perftests.models.fp8 import E4M3_UNIT, fp8_linears
from perftests.models.transformer import build, linear_flops, workload
from perftests.support.compile_time import COMPILE_TIME_TOLERANCE, timed_call
from perftests.support.inputs import GRAPH_REPLAYS, fixed_inputs
from perftests.support.tolerance import intermediate_rounding_atol
from speedgate.precision import fp32_matmul_precision

# Rungs 3 and 4 compare compiled passes: each compile gives a pointwise kernel one config (one_pointwise_config), not
# a process's pick among candidates that time alike alone and apart in the pass (docs/results/gate-study-h200.md).
pytestmark = [pytest.mark.compile, pytest.mark.usefixtures("one_pointwise_config")]

RUNGS = ("fp32_manual", "tf32_bf16_amp", "sdpa", "compile", "fp8_linear")
BF16_UNIT = 2.0**-8
SAFETY = 3.0


def rel_l2_bound(unit: float) -> float:
    return SAFETY * math.sqrt(2.0 / 3.0) * unit


class Ladder:
    """The five rungs over one set of fp32 weights and one batch of tokens, each a zero-argument callable."""

    def __init__(self, device: str) -> None:
        cfg, batch, seq, _ = workload(device)
        self.cfg, self.device = cfg, device
        self.tokens = torch.randint(0, cfg.vocab, (batch, seq), device=device)
        self.flops = linear_flops(build(cfg, "meta", torch.float32), batch * seq)
        sdpa = build(cfg, device, torch.float32)
        manual = copy.deepcopy(sdpa)
        for block in manual.blocks:
            block.attention = "manual"
        fp8 = copy.deepcopy(sdpa)
        for block in fp8.blocks:
            fp8_linears(block)
        torch._dynamo.reset()
        self.models: dict[str, Callable[..., torch.Tensor]] = {
            "fp32_manual": manual,
            "tf32_bf16_amp": manual,
            "sdpa": sdpa,
            "compile": torch.compile(sdpa),
            "fp8_linear": torch.compile(fp8),
        }
        self.first_call_s: dict[str, float] = {}
        self.outputs: dict[str, torch.Tensor] = {}

    def runner(self, rung: str) -> Callable[[], torch.Tensor]:
        model = self.models[rung]
        amp = rung != "fp32_manual"
        precision = "high" if amp else "highest"  # "high": fp32 matmuls may use TF32

        def run() -> torch.Tensor:
            # given back exactly: inductor keys its FX graph cache on the setting (speedgate.precision)
            with fp32_matmul_precision(torch, precision), torch.no_grad(), \
                    torch.autocast(self.device, dtype=torch.bfloat16, enabled=amp):
                return model(self.tokens)

        return run

    def output(self, rung: str) -> torch.Tensor:
        """The rung's logits as fp32 (computed once; the first call of a compiled rung is its compile, timed)."""
        if rung not in self.outputs:
            out, self.first_call_s[rung] = timed_call(self.runner(rung), self.device)
            self.outputs[rung] = out.float()
        return self.outputs[rung]

    def bound(self, rung: str) -> float:
        """The normwise error bound of a rung against the fp32 function (see the module's docstring)."""
        if rung == "fp32_manual":
            return 0.0
        unit = E4M3_UNIT if rung == "fp8_linear" else BF16_UNIT
        return rel_l2_bound(unit)


@pytest.fixture(scope="module")
def ladder(device: str) -> Ladder:
    return Ladder(device)


def check_rung(perf: Any, ladder: Ladder, rung: str, previous: str) -> None:
    truth = ladder.output("fp32_manual")
    out = ladder.output(rung)
    perf.assert_close(out, truth, rel_l2=ladder.bound(rung))
    if previous == "fp32_manual":
        return
    if ladder.bound(rung) == ladder.bound(previous):
        # Same precision (compiling): fused code rounds once where eager rounds after each op; about two bf16
        # roundings of the residual stream per block, carried to the logits (as in test_compile_modes).
        expected = ladder.output(previous)
        perf.assert_close(out, expected, rtol=1.6e-2, atol=intermediate_rounding_atol(expected, torch.bfloat16, 2.0 * ladder.cfg.layers))
    else:
        perf.assert_close(out, ladder.output(previous), rel_l2=ladder.bound(rung) + ladder.bound(previous))


@pytest.mark.parametrize("index", range(1, len(RUNGS)), ids=[f"{i}-{name}" for i, name in enumerate(RUNGS) if i])
def test_ladder_rung(perf, ladder: Ladder, index: int) -> None:
    rung, previous = RUNGS[index], RUNGS[index - 1]
    check_rung(perf, ladder, rung, previous)
    if rung in ("compile", "fp8_linear"):
        perf.metric("compile_s_in_process", ladder.first_call_s[rung], tolerance=COMPILE_TIME_TOLERANCE, unit="s")
    work = dict(flops=ladder.flops, flops_dtype="fp8" if rung == "fp8_linear" else "bf16") if ladder.device == "cuda" else {}
    optimized = ladder.runner(rung)
    # Each rung replayed from a CUDA graph: the device's work, as the ladder compares it. Timed as it is, behind the
    # hold, a call of a few hundred kernels fills the launch queue, so the host queues the batch while the device
    # runs it, and host gaps reach the timing (docs/results/kernel-comments.md, "Test files"). A graph replays the
    # tokens it captured: the rungs run on the ladder's one batch.
    replayed = dict(check=False, graph=True, waive=fixed_inputs(GRAPH_REPLAYS), **work)
    perf.compare(ladder.runner(previous), optimized, name=f"vs_{previous}", **replayed)
    if previous != "fp32_manual":
        perf.compare(ladder.runner("fp32_manual"), optimized, name="vs_fp32_manual", **replayed)
