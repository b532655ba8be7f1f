"""torch.compile modes on the chapter's small transformer (d_model 512, 8 heads, 6 layers, d_ff 2048, vocab 10k):
eager in the same dtype as the reference; speedup, compile seconds and peak memory per mode.

Compile seconds come two ways: in this process (the compiled model's first call, timed by itself; earlier cases in
the same process may have warmed inductor's caches), and in fresh processes with empty and with filled compile
caches (cold and warm), each gated as a metric.
"""

from __future__ import annotations

import time

import pytest
import torch

from perftests.compile_time import cold_and_warm
from perftests.kernels.common import intermediate_rounding_atol
from perftests.models.transformer import build, workload

pytestmark = pytest.mark.compile

MODES = ["default", "reduce-overhead", "max-autotune"]
# Compile seconds vary with the machine's load and its disk: gate them loosely, speedups at the default tolerance.
COMPILE_TIME_TOLERANCE = 0.5


def logits_tolerance(expected: torch.Tensor, layers: int) -> dict[str, float]:
    # Compiled code fuses ops and rounds once where eager rounds after each: per block about two 16-bit roundings
    # of the residual stream (attention and MLP), carried to the logits. fp32 on the CPU: the same in its roundoff.
    rtol = 1.6e-2 if expected.dtype == torch.bfloat16 else 1.3e-6
    return dict(rtol=rtol, atol=intermediate_rounding_atol(expected, expected.dtype, factor=2.0 * layers))


@pytest.mark.parametrize("mode", MODES)
def test_compile_mode(perf, device: str, mode: str) -> None:
    cfg, batch, seq, dtype = workload(device)
    model = build(cfg, device, dtype)
    tokens = torch.randint(0, cfg.vocab, (batch, seq), device=device)
    torch._dynamo.reset()
    compiled = torch.compile(model, mode=None if mode == "default" else mode)

    def eager() -> torch.Tensor:
        with torch.no_grad():
            return model(tokens)

    def run_compiled() -> torch.Tensor:
        with torch.no_grad():
            return compiled(tokens)

    expected = eager()
    tol = logits_tolerance(expected, cfg.layers)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    # The first compiled call is the compile (trace, inductor, autotuning in max-autotune): timed here, by itself.
    sync()
    start = time.perf_counter()
    first = run_compiled()
    sync()
    compile_s = time.perf_counter() - start
    perf.assert_close(first.clone(), expected, **tol)  # clone: cudagraph outputs are overwritten by later replays
    flops = 2.0 * batch * seq * sum(p.numel() for p in model.parameters() if p.dim() == 2)  # the linear layers
    perf.compare(eager, run_compiled, name="vs_eager", check=False, flops=flops,
                          flops_dtype="bf16" if dtype == torch.bfloat16 else None)
    if device == "cuda":
        perf.metric("peak_memory_gib", torch.cuda.max_memory_allocated() / 2**30, tolerance=0.10, unit="GiB")
    perf.metric("compile_s_in_process", compile_s, tolerance=COMPILE_TIME_TOLERANCE, unit="s")


def test_compile_time_cold_and_warm(perf, device: str) -> None:
    """Default mode, each measurement in a fresh process: an empty cache, then the cache that run filled."""
    cold, warm = cold_and_warm("perftests.models.transformer:compile_time_builder", "default")
    assert warm < cold, f"a warm compile cache did not help: cold {cold:.1f} s, warm {warm:.1f} s"
    perf.metric("compile_s_cold", cold, tolerance=COMPILE_TIME_TOLERANCE, unit="s")
    perf.metric("compile_s_warm", warm, tolerance=COMPILE_TIME_TOLERANCE, unit="s")
