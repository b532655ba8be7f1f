"""Do SM cycles see through the power cap? Each heavy pair of the suite timed in milliseconds and in SM cycles (GPU)

Usage: python -m lab.cycles_probe OUT [--size 8192] [--batches 8] [--pairs fp8_tiled,fp8_persistent,bf16_tiled,gluon]
(also attn2048_compile, attn2048_sdpa, attn2048_eager: the causal flash kernel at 2048 tokens beside each reference;
k_chunked: the CUTLASS GEMM beside the K-chunked matmul loop at 4096^3, see cutlass_pairs;
mlp, mlp_flat, mlp_plain, mlp_plain_flat, mlp_<config>: the fused MLP block's GEMM in its forms, see mlp_pairs;
mlp_block_eager_<MxN>, mlp_block_compiled_<MxN>: the fused block's two comparisons at a tile, see mlp_block_pairs)
       [--conditions suite,cooled] (also long: batches of about 400 ms of work, the clock lower still)

The 8192^3 matmuls' speedups move 10-30% between cards of one kind (docs/results/calibration.md): at the power cap
each card settles at its own SM clock, and the two sides of a pair lose different shares there. This probe times
each pair as the gate does (speedgate's CUDA timer: a hold, AB/BA rounds, L2 flush) with a stamp kernel on the timed
stream right before and right after every call, inside the events. A stamp is one program per SM writing its SM id,
%clock64 and %globaltimer; matched by SM id, after minus before is the call's length in that SM's cycles (SM clocks
need not agree with each other, only each with itself). So every round gives each side a time in ms, in cycles,
and their ratio, the SM clock the call ran at.

Conditions (what comes before each batch): `suite` (about 50 ms of work, the host's few ms between: the gate's own
rhythm, at the cap), `cooled` (each batch after 300 ms idle: mostly the full clock). For each pair and condition it
prints the speedup of the medians in ms and in cycles, and each side's median clock. If the cycle speedup stays put
where the ms one moves (between conditions here, between cards in the fleet), cycles remove the cap from the ratio.
Then each side's elasticity (elasticity()): how its cycles move with its clock between the conditions furthest apart;
a ratio moves with the clock by its sides' elasticities apart (what the fused MLP's forms read:
docs/results/gate-study-h200.md, "The fused MLP's tile and the clock"). OUT/cycles_probe.json keeps every round.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Pairs = dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]]  # name: (reference, optimized, hold)
CONDITIONS = {"suite": (50.0, 0.003), "cooled": (50.0, 0.3), "long": (400.0, 0.003)}
# work per batch (ms), host idle before it (s)
MLP_SHAPE = (8192, 4096, 16384)  # test_fused_mlp_block's GPU shape: tokens, d_model, d_ff
MLP_CASE = "perftests/test_triton_mlp.py::test_fused_mlp_block::vs_eager"
# The autotuner's other 16-bit candidates for the MLP's GEMM (mm.tile_configs after prune): mlp_<M>x<N>s<stages>w<warps>
MLP_TILES = ((128, 256, 3, 8), (256, 128, 3, 8), (128, 128, 4, 8), (128, 128, 3, 4), (64, 256, 4, 4), (128, 64, 4, 4))


class Stamps:
    """Stamp buffers for `calls` calls (before and after each), and the cycles and clock each call ran: the gate's
    own stamp kernel and reading (speedgate.timers.cycles)."""

    def __init__(self, torch: Any, calls: int) -> None:
        from speedgate.timers.cycles import stamp_kernel

        self.torch = torch
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.buf = torch.zeros((calls, 2, self.sms, 3), dtype=torch.int64, device="cuda")
        self.kernel = stamp_kernel()

    def wrap(self, fn: Callable[[], Any], index: int) -> Callable[[], Any]:
        from speedgate.timers.cycles import stamped

        return stamped(self.kernel, self.sms, fn, self.buf[index, 0], self.buf[index, 1])

    def read(self, count: int) -> list[tuple[float, float]]:
        """(cycles, MHz) of each of the first `count` calls: the median over SMs seen in both stamps."""
        from speedgate.timers.cycles import cycles_of

        cycles, mhz = cycles_of(self.buf[:count], self.torch)
        return list(zip(cycles, mhz))


@functools.cache
def blessed_cases(hardware_key: str) -> dict[str, Any]:
    """The committed baseline file's entries for this GPU kind (read once: the matmul and MLP families both ask)."""
    root = Path(__file__).resolve().parents[1]
    return json.loads((root / "baselines" / f"{hardware_key}.json").read_text())["cases"]


def holder() -> Callable[[Any, dict[str, Any] | None], Callable[[], None]]:
    """hold_to(tuner, config): a pair's hold step, which first lets go of the hold the last pair's step took (one
    hold at a time, whichever family's pair took it)."""
    from perftests.kernels.common import hold

    restores: list[Callable[[], None]] = []

    def hold_to(tuner: Any, config: dict[str, Any] | None) -> Callable[[], None]:
        def apply() -> None:
            while restores:
                restores.pop()()
            restores.append(hold(tuner, config))
        return apply
    return hold_to


def matmul_pairs(torch: Any, size: int, hardware_key: str,
                 hold_to: Callable[[Any, dict[str, Any] | None], Callable[[], None]],
                 ) -> Pairs:
    """The heavy matmul pairs (reference, optimized, hold) at size^3; hold() holds the pair's autotuned Triton kernel
    to the config its case was blessed with (call it before the pair's first call)."""
    import torch.nn.functional as F

    from perftests.kernels import matmul as mm
    from perftests.support.matmul import fp8_operands, operands, scaled_mm

    cases = blessed_cases(hardware_key)

    def blessed(case: str) -> dict[str, Any] | None:
        entry = cases.get(f"perftests/test_triton_matmul.py::{case}")
        return None if entry is None else entry.get("config")

    x8, w8, sx, sw = fp8_operands("cuda", size, size, size, 0)
    xb, wb = operands("cuda", torch.bfloat16, size, size, size)
    tiled, tiled_tuner = mm.launcher("tiled")
    persistent, persistent_tuner = mm.launcher("tma_persistent")

    def holding(tuner: Any, case: str) -> Callable[[], None]:
        return hold_to(tuner, blessed(case))

    found = {
        "fp8_tiled": (lambda: scaled_mm(x8, w8, sx, sw), lambda: tiled(x8, w8, scale_x=sx, scale_w=sw),
                      holding(tiled_tuner, f"test_fp8_matmul[tiled-{size}]::vs_scaled_mm")),
        "fp8_persistent": (lambda: scaled_mm(x8, w8, sx, sw), lambda: persistent(x8, w8, scale_x=sx, scale_w=sw),
                           holding(persistent_tuner, f"test_fp8_matmul[tma_persistent-{size}]::vs_scaled_mm")),
        "bf16_tiled": (lambda: F.linear(xb, wb), lambda: tiled(xb, wb),
                       holding(tiled_tuner, f"test_matmul[tiled-{size}-bfloat16]::vs_cublas")),
    }
    try:
        from perftests.kernels import matmul_gluon

        found["gluon"] = (lambda: persistent(x8, w8, scale_x=sx, scale_w=sw), lambda: matmul_gluon.fp8_matmul(x8, w8, sx, sw),
                          holding(persistent_tuner, f"test_fp8_matmul[tma_persistent-{size}]::vs_scaled_mm"))
    except Exception as exc:  # noqa: BLE001 - a probe reports what it could not run
        print(f"gluon pair left out: {exc!r}")
    return found


# Each pair's family: a pair's inputs are built only when a pair of its family is asked for (pairs()).
FAMILIES = ("mlp_block_", "mlp", "attn2048_", "k_chunked")


def family(name: str) -> str:
    """The family a pair's name belongs to (FAMILIES: the first prefix that matches), or 'matmul'."""
    return next((prefix for prefix in FAMILIES if name.startswith(prefix)), "matmul")


def pairs(torch: Any, size: int, hardware_key: str, names: list[str],
          ) -> Pairs:
    """The pairs `names` asks for, each as (reference, optimized, hold), built family by family: a family none of
    `names` belongs to builds no inputs, compiles nothing and imports nothing of its own."""
    hold_to = holder()

    def with_persistent_hold() -> Pairs:
        from perftests.kernels import matmul as mm

        _, tuner = mm.launcher("tma_persistent")
        return mlp_block_pairs(torch, lambda config: hold_to(tuner, config))

    builders: dict[str, Callable[[], Pairs]] = {
        "matmul": lambda: matmul_pairs(torch, size, hardware_key, hold_to), "attn2048_": lambda: attention_pairs(torch),
        "k_chunked": lambda: cutlass_pairs(torch), "mlp": lambda: mlp_pairs(torch, blessed_cases(hardware_key)), "mlp_block_": with_persistent_hold}
    found: Pairs = {}
    for wanted in dict.fromkeys(family(name) for name in names):
        try:
            found.update(builders[wanted]())
        except Exception as exc:  # noqa: BLE001 - a probe reports what it could not run
            print(f"{wanted} pairs left out: {exc!r}")
    return found


def mlp_pairs(torch: Any, cases: dict[str, Any]) -> Pairs:
    """The fused MLP block's GEMM (test_fused_mlp_block: the persistent kernel with the row scale and the GELU in
    its epilogue) beside cuBLAS's GEMM of the same shape, in the forms that tell where its cycles go when the clock
    moves: `mlp` the suite's kernel at its blessed config (lab.matmul_variants with every switch at its default
    compiles to the suite kernel's PTX); `mlp_flat` the tile loop flattened into the K loop (the next tile's loads
    issued under this tile's epilogue); `mlp_plain` without the epilogue's row scale and GELU; `mlp_plain_flat`
    both; `mlp_<M>x<N>s<stages>w<warps>` the autotuner's other 16-bit candidates, as `mlp`."""
    import torch.nn.functional as F

    from lab import matmul_variants as variants

    M, K, N = MLP_SHAPE
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    rstd = torch.rsqrt(x.float().square().mean(dim=1) + 1e-6)  # the row scale the block's rstd pass computes
    entry = cases.get(MLP_CASE) or {}
    blessed = entry.get("config") or {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3,
                                      "num_warps": 8}
    nothing: Callable[[], Any] = lambda: None  # noqa: E731

    def form(config: dict[str, Any], epilogue: bool = True, **switches: Any) -> Callable[[], Any]:
        extra: dict[str, Any] = dict(activation="gelu_tanh", row_scale=rstd) if epilogue else {}
        return lambda: variants.matmul_tma_persistent(x, w, **extra, config=config, **switches)

    reference = lambda: F.linear(x, w)  # noqa: E731
    found = {"mlp": (reference, form(blessed), nothing), "mlp_flat": (reference, form(blessed, flatten=True), nothing),
             "mlp_plain": (reference, form(blessed, False), nothing),
             "mlp_plain_flat": (reference, form(blessed, False, flatten=True), nothing)}
    for m, n, stages, warps in MLP_TILES:
        config = {**blessed, "BLOCK_M": m, "BLOCK_N": n, "num_stages": stages, "num_warps": warps}
        found[f"mlp_{m}x{n}s{stages}w{warps}"] = (reference, form(config), nothing)
    return {name: (ref, opt, checking(name, opt, rstd, reference)) for name, (ref, opt, _) in found.items()}


def mlp_block_pairs(torch: Any, hold_to: Callable[[dict[str, Any]], Callable[[], None]],
                    ) -> Pairs:
    """test_fused_mlp_block's two comparisons as the case makes them: the fused block (mlp.fused_rmsnorm_linear_gelu:
    the rstd pass, then the persistent GEMM with the row scale and the GELU in its epilogue), its GEMM held
    (`hold_to(config)`, the pair's hold step) to the 128x256 or the 256x128 tile, beside the eager block
    (`mlp_block_eager_<M>x<N>`) and its compiled form (`mlp_block_compiled_<M>x<N>`). A ratio's movement with the
    clock is its two sides' elasticities apart: the references hold memory-bound kernels."""
    from perftests.kernels import mlp
    from perftests.support.compiled import compiled
    from perftests.test_triton_mlp import EPS, mlp_block_eager

    M, K, N = MLP_SHAPE
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    gain = (torch.rand(K, device="cuda") + 0.5).to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    w_folded = mlp.fold_gain(w, gain)
    compiled_block = compiled(mlp_block_eager)
    fused = lambda: mlp.fused_rmsnorm_linear_gelu(x, w_folded, EPS)  # noqa: E731
    found: Pairs = {}
    for m, n in ((128, 256), (256, 128)):
        held = hold_to({"BLOCK_K": 64, "BLOCK_M": m, "BLOCK_N": n, "GROUP_M": 8, "num_stages": 3, "num_warps": 8})
        found[f"mlp_block_eager_{m}x{n}"] = (lambda: mlp_block_eager(x, gain, w), fused, held)
        found[f"mlp_block_compiled_{m}x{n}"] = (lambda: compiled_block(x, gain, w), fused, held)
    return found


def checking(name: str, optimized: Callable[[], Any], rstd: Any, reference: Callable[[], Any]) -> Callable[[], None]:
    """The hold step of an MLP form: its product checked against cuBLAS's GEMM (with the epilogue applied in fp32
    where the form has one) before it is timed; a form that computes something else is not timed."""
    def check() -> None:
        import torch
        import torch.nn.functional as F

        exact = reference().float()
        if "plain" not in name:
            exact = F.gelu(exact * rstd[:, None], approximate="tanh")
        got = optimized().float()
        torch.testing.assert_close(got, exact, rtol=1.6e-2, atol=2.0**-7 * float(exact.abs().max()),
                                   msg=lambda m: f"{name} computes another product: {m}")
    return check


def elasticity(res: dict[str, Any], side: str) -> float | None:
    """How a side's median cycles move with its median clock between the two conditions furthest apart in clock:
    d ln(cycles) / d ln(MHz). 0: its cycles are the clock's (compute at the SM's pace); 1: its time is fixed (a
    wait the SM clock does not set), so its cycles grow with the clock."""
    points = sorted((r["medians"][f"{side}_mhz"], r["medians"][f"{side}_cycles"]) for r in res.values())
    (low_mhz, low_cycles), (high_mhz, high_cycles) = points[0], points[-1]
    if high_mhz <= low_mhz * 1.01:
        return None
    return math.log(high_cycles / low_cycles) / math.log(high_mhz / low_mhz)


def attention_pairs(torch: Any) -> Pairs:
    """The causal flash-attention kernel at 2048 tokens, head dim 128 (test_flash_attention's GPU shape) beside each of
    its case's three references: its `vs_compile` read the kernel slower beside the compiled reference than beside
    the others on some H200s, with no clock-event reason recorded (docs/results/gate-study-h200.md)."""
    import torch.nn.functional as F

    from perftests.kernels import attention as attn
    from perftests.support.compiled import compiled
    from perftests.test_triton_attention import inputs

    make, _ = inputs("cuda", 2048, 128)
    q, k, v = make(0)
    flash = lambda: attn.flash_attention(q, k, v, True)  # noqa: E731
    compiled_eager = compiled(attn.attention_eager)
    nothing: Callable[[], Any] = lambda: None  # noqa: E731
    return {
        "attn2048_compile": (lambda: compiled_eager(q, k, v, True), flash, nothing),
        "attn2048_sdpa": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), flash, nothing),
        "attn2048_eager": (lambda: attn.attention_eager(q, k, v, True), flash, nothing),
    }


def cutlass_pairs(torch: Any) -> Pairs:
    """`k_chunked`: the chapter's framing (test_cutlass_vs_k_chunked_matmul), one CUTLASS GEMM at 4096^3 bf16 beside
    the K-chunked torch.matmul loop. Its CUTLASS side's milliseconds spread across cards, the slower the card the less
    of the comparison the power cap held (docs/results/gate-study-h200.md, the twenty-fourth study): the clock each
    side runs at, card by card, says whether that is the clock the card holds the kernel at. Needs the DSL and a
    Hopper GPU (the test's own gpu_reason)."""
    from perftests.kernels import cutlass_gemm as cg
    from perftests.support.matmul import operands
    from perftests.test_cutlass_matmul import gpu_reason, k_chunked_matmul
    from perftests.test_triton_matmul import GPU_SHAPES

    if reason := gpu_reason("cuda"):
        raise RuntimeError(reason)
    M, N, K = GPU_SHAPES["4096"]
    x, w = operands("cuda", torch.bfloat16, M, N, K)
    nothing: Callable[[], Any] = lambda: None  # noqa: E731
    return {"k_chunked": (lambda: k_chunked_matmul(x, w), lambda: cg.matmul(x, w), nothing)}


def measure(torch: Any, reference: Callable[[], Any], optimized: Callable[[], Any], batches: int,
            conditions: tuple[str, ...] = ("suite", "cooled")) -> dict[str, Any]:
    from speedgate.timers.cuda import CudaTimer

    timer = CudaTimer(torch)
    for fn in (reference, optimized):
        timer.first_call(fn)
    timer.time_each([reference, optimized] * 10)
    pair_ms = statistics.median(timer.time_each([reference, optimized] * 4)) * 2
    result: dict[str, Any] = {}
    for name in conditions:
        work_ms, idle_s = CONDITIONS[name]
        count = max(2, int(work_ms / pair_ms))
        stamps = Stamps(torch, 2 * count)
        rows: dict[str, list[Any]] = {"ref_ms": [], "opt_ms": [], "ref_cycles": [], "opt_cycles": [],
                                      "ref_mhz": [], "opt_mhz": [], "opt_after_ref": [], "batch_at": []}
        # warm-up at the condition, as the gate's sustained warm-up does
        timer.time_each([reference, optimized] * count)
        for _ in range(batches):
            torch.cuda.synchronize()
            time.sleep(idle_s)
            order = []
            for i in range(count):
                first, second = (reference, optimized) if i % 2 == 0 else (optimized, reference)
                order += [stamps.wrap(first, 2 * i), stamps.wrap(second, 2 * i + 1)]
            rows["batch_at"].append(time.time())  # the batch's wall-clock start, to line it up with an NVML log
            times = timer.time_each(order)
            read = stamps.read(2 * count)
            for i in range(count):
                ri, oi = (2 * i, 2 * i + 1) if i % 2 == 0 else (2 * i + 1, 2 * i)
                rows["ref_ms"].append(times[ri])
                rows["opt_ms"].append(times[oi])
                rows["ref_cycles"].append(read[ri][0])
                rows["opt_cycles"].append(read[oi][0])
                rows["ref_mhz"].append(read[ri][1])
                rows["opt_mhz"].append(read[oi][1])
                rows["opt_after_ref"].append(i % 2 == 0)  # AB rounds: the optimized call right after a reference
        med = {k: statistics.median(v) for k, v in rows.items() if k not in ("opt_after_ref", "batch_at")}
        for after, label in ((True, "after_ref"), (False, "after_opt")):
            for field in ("ms", "cycles", "mhz"):
                picked = [t for t, a in zip(rows[f"opt_{field}"], rows["opt_after_ref"]) if a is after]
                if picked:
                    med[f"opt_{field}_{label}"] = statistics.median(picked)
        result[name] = {"rounds": len(rows["ref_ms"]), "speedup_ms": med["ref_ms"] / med["opt_ms"],
                        "speedup_cycles": med["ref_cycles"] / med["opt_cycles"], "medians": med, "rows": rows}
    return result


def after(medians: dict[str, float], side: str) -> str:
    """The optimized side's medians over its calls right after `side` ('ref' or 'opt'): ms, cycles, MHz."""
    nan = float("nan")
    return (f"{medians.get(f'opt_ms_after_{side}', nan):.4f} ms {medians.get(f'opt_cycles_after_{side}', nan):.0f} cycles "
            f"{medians.get(f'opt_mhz_after_{side}', nan):.0f} MHz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--pairs", default="fp8_tiled,fp8_persistent,bf16_tiled,gluon")
    parser.add_argument("--conditions", default="suite,cooled")
    args = parser.parse_args()
    conditions = tuple(args.conditions.split(","))
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        parser.error(f"unknown condition(s) {', '.join(unknown)}; known: {', '.join(CONDITIONS)}")
    import torch

    from speedgate.hardware import detect

    fp = detect(None)
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.pairs.split(",")
    found = pairs(torch, args.size, fp.key, names)
    results: dict[str, Any] = {"card": fp.card, "hardware_key": fp.key, "size": args.size, "pairs": {}}
    for name in names:
        if name not in found:
            print(f"{name}: no such pair here (left out above, or not a pair's name)")
            continue
        reference, optimized, hold_blessed = found[name]
        hold_blessed()
        results["pairs"][name] = res = measure(torch, reference, optimized, args.batches, conditions)
        for cond, r in res.items():
            m = r["medians"]
            print(f"{fp.card} {name:15} {cond:7} rounds {r['rounds']:4}  ms {r['speedup_ms']:.4f}x  cycles "
                  f"{r['speedup_cycles']:.4f}x  ref {m['ref_ms']:.4f} ms {m['ref_mhz']:.0f} MHz  opt {m['opt_ms']:.4f} ms "
                  f"{m['opt_mhz']:.0f} MHz (after a reference {after(m, 'ref')}, after itself {after(m, 'opt')})", flush=True)
        slopes = {side: elasticity(res, side) for side in ("ref", "opt")}
        print(f"{fp.card} {name:15} cycles' elasticity to the clock: " + "  ".join(
            f"{side} {'n/a' if e is None else f'{e:.3f}'}" for side, e in slopes.items()), flush=True)
    (args.out / "cycles_probe.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
