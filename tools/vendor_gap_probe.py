"""The vendor gap's experiments side by side in one process (GPU only): variants of the persistent fp8 matmul and of
the flash-attention kernel against the vendor's kernels (torch._scaled_mm, SDPA), timed as the gate times them
(speedgate's CudaTimer: events, the L2 flushed before every call, the device held while the host queues), sides
alternated over rounds. Per variant: its autotuned config, registers, spills and shared memory, and its error
(fp8: relative L2 against the exact product of the same fp8 operands, beside the vendor's; attention: the largest
difference from SDPA). A variant that fails to compile or to match is reported and left out of the timing.

Usage: python tools/vendor_gap_probe.py [--only fp8|attention] [--rounds 5] [--json PATH]
The variants are the kernels' experiment switches (`matmul_tma_persistent(promote_every=, warp_specialize=)`,
`flash_attention(fold=, heavy_first=, warp_specialize=)`), off in the suite. What each predicted and what it
measured belongs in docs/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FP8_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "promote_every_2": {"promote_every": 2},
    "promote_every_4": {"promote_every": 4},
    "warp_specialize": {"warp_specialize": True},
    "promote_every_2+warp_specialize": {"promote_every": 2, "warp_specialize": True},
}
ATTENTION_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "fold": {"fold": True},
    "fold+heavy_first": {"fold": True, "heavy_first": True},
    "fold+warp_specialize": {"fold": True, "warp_specialize": True},
}
BATCH_MS = 20.0  # device time of one timed batch
DEVICE = "cuda"
FP8_SIZES = (4096, 8192)
ATTENTION_TOKENS, ATTENTION_WIDTH = 16384, 1024  # B x S tokens and H x D per token, as in the suite's cases
ATTENTION_SHAPES = [(seq, head_dim, causal) for seq in (2048, 8192) for head_dim in (64, 128) for causal in (False, True)]


def interleaved_ms(timer: Any, sides: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Each side's median over `rounds` rounds of a batch of calls, the sides' order rotated every round."""
    names = list(sides)
    per_call = {name: statistics.median(timer.time_each([sides[name]] * 5)) for name in names}
    batches: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            n = max(5, min(200, int(BATCH_MS / max(per_call[name], 1e-3))))
            batches[name].append(statistics.median(timer.time_each([sides[name]] * n)))
    return {name: statistics.median(ms) for name, ms in batches.items()}


def resources(tuner: Any) -> dict[str, Any]:
    """The autotuner's last choice and what its compiled kernel holds (tools/inspect_kernels.py)."""
    from perftests.kernels.common import best_config
    from tools.inspect_kernels import compiled_for

    out: dict[str, Any] = {"config": best_config(tuner)}
    try:
        compiled = compiled_for(tuner, tuner.best_config)
        out.update(regs=compiled.n_regs, spills=compiled.n_spills, smem_kib=compiled.metadata.shared // 1024)
    except Exception as exc:  # a diagnostic: say what could not be read
        out["resources"] = f"{type(exc).__name__}: {exc}"
    return out


def rel_l2(actual: Any, exact: Any) -> float:
    return float((actual.float() - exact).norm() / exact.norm())


def probe_fp8(timer: Any, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for n in FP8_SIZES:
        rows += probe_fp8_shape(timer, rounds, n)
    return rows


def probe_fp8_shape(timer: Any, rounds: int, n: int) -> list[dict[str, Any]]:
    from perftests.kernels import matmul as mm
    from perftests.support.matmul import fp8_operands, scaled_mm, scaled_mm_fast

    x8, w8, sx, sw = fp8_operands(DEVICE, n, n, n, 0)
    exact = (x8.float() @ w8.float().t()) * (sx * sw)
    sides: dict[str, Callable[[], Any]] = {
        "_scaled_mm": lambda: scaled_mm(x8, w8, sx, sw),
        "_scaled_mm_fast": lambda: scaled_mm_fast(x8, w8, sx, sw),
    }
    info: dict[str, dict[str, Any]] = {name: {"rel_l2": rel_l2(fn(), exact)} for name, fn in sides.items()}
    for name, variant in FP8_VARIANTS.items():
        def run(variant: dict[str, Any] = variant) -> Any:
            return mm.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, **variant)
        try:
            err = rel_l2(run(), exact)
        except Exception as exc:  # a variant Triton cannot build here: reported, not timed
            info[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
            continue
        info[name] = {"rel_l2": err, **resources(mm._matmul_tma_persistent_kernel)}
        sides[name] = run
    del exact
    times = interleaved_ms(timer, sides, rounds)
    rows = []
    for name, data in info.items():
        ms = times.get(name)
        row = {"case": f"fp8 {n}^3", "side": name, "ms": ms, **data}
        if ms is not None:
            row["vs_scaled_mm"] = times["_scaled_mm"] / ms
            row["tflops"] = 2.0 * n**3 / (ms * 1e-3) / 1e12
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def probe_attention(torch: Any, timer: Any, rounds: int) -> list[dict[str, Any]]:
    import torch.nn.functional as F

    from perftests.kernels import attention as attn

    rows = []
    for seq, head_dim, causal in ATTENTION_SHAPES:
        B, H = max(1, ATTENTION_TOKENS // seq), max(1, ATTENTION_WIDTH // head_dim)
        g = torch.Generator(device=DEVICE).manual_seed(0)
        dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float16
        q, k, v = (torch.randn(B, H, seq, head_dim, generator=g, device=DEVICE, dtype=dtype) for _ in range(3))
        sdpa = lambda q=q, k=k, v=v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        expected = sdpa()
        sides: dict[str, Callable[[], Any]] = {"sdpa": sdpa}
        info: dict[str, dict[str, Any]] = {"sdpa": {}}
        for name, variant in ATTENTION_VARIANTS.items():
            if variant.get("heavy_first") and not causal:
                continue
            def run(variant: dict[str, Any] = variant, q: Any = q, k: Any = k, v: Any = v, causal: bool = causal) -> Any:
                return attn.flash_attention(q, k, v, causal, **variant)
            try:
                diff = float((run().float() - expected.float()).abs().max())
            except Exception as exc:  # reported, not timed
                info[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
                continue
            if diff > 0.05:  # the suite's bf16 bound is rtol 1.6e-2 plus a few roundings: far past it
                info[name] = {"failed": f"differs from SDPA by up to {diff:.3g}"}
                continue
            info[name] = {"max_abs_diff": diff, **resources(attn._attn_fwd_kernel)}
            sides[name] = run
        times = interleaved_ms(timer, sides, rounds)
        flops = attn.attention_flops(B, H, seq, head_dim, causal)
        label = f"attention {B}x{H}x{seq}x{head_dim}{' causal' if causal else ''}"
        for name, data in info.items():
            ms = times.get(name)
            row = {"case": label, "side": name, "ms": ms, **data}
            if ms is not None:
                row["vs_sdpa"] = times["sdpa"] / ms
                row["tflops"] = flops / (ms * 1e-3) / 1e12
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("fp8", "attention"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import torch

    from speedgate.timers import CudaTimer

    if not torch.cuda.is_available():
        sys.exit("vendor_gap_probe: needs a CUDA GPU (the variants are Hopper experiments)")
    timer = CudaTimer(torch)
    rows: list[dict[str, Any]] = []
    if args.only in (None, "fp8"):
        rows += probe_fp8(timer, args.rounds)
    if args.only in (None, "attention"):
        rows += probe_attention(torch, timer, args.rounds)
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
