"""The vendor gap's experiments side by side in one process (GPU only): variants of the persistent fp8 matmul and of
the flash-attention kernel against the vendor's kernels (torch._scaled_mm, SDPA), timed as the gate times them
(speedgate's CudaTimer: events, the L2 flushed before every call, the device held while the host queues), sides
alternated over rounds. Per variant: its autotuned config, registers, spills and shared memory, and its error
(fp8: relative L2 against the exact product of the same fp8 operands, beside the vendor's; attention: the largest
difference from SDPA). A variant that fails to compile or to match is reported and left out of the timing.

Usage: python lab/vendor_gap_probe.py [--only fp8|attention] [--rounds 5] [--json PATH] [--no-graph] [--sweep]
       [--shapes 8192-128-full ...] [--residency] [--gluon [PART ...]] [--variants default no_softmax ...]
       [--sustained SECONDS]
Each side is replayed from a CUDA graph unless --no-graph (what is compared is the kernels, not their launches: the
persistent kernel's host launch, three TMA descriptors, is as long as its 0.13 ms kernel at 4096^3); the sides run
in a new random order every round. --sweep adds the default variant at each candidate config as sides of their own
(config= runs one without the race: fp8, the autotuner's configs and two of 64x128 tiles; attention, the kernel's
one tile, the tiles its autotuner used to race and a few more): is the kernel's pick the one the gate would time
fastest? Attention also times SDPA's FlashAttention-2 backend (`sdpa_flash`), the build inside PyTorch, beside its
default (cuDNN on the H100). The variants are the lab's forms of the suite's kernels (lab/matmul_variants.py's
`matmul_tma_persistent(promote_every=, warp_specialize=, blocks_per_sm=)`, lab/attention_variants.py's
`flash_attention(fold=, heavy_first=, warp_specialize=, ...)`; each at its defaults is the suite's kernel, `default`):
attention's fold and heavy_first are the suite kernel's form, and `unfolded` times the kernel without them.
`no_softmax` (a diagnostic, timed but never checked: wrong by design) is the kernel's loop without its softmax, what
the MMAs and loads take alone. --residency traces each attention side of the kernel once (every program's
start, end and SM) and reports the thread blocks an SM held while programs were waiting to launch, beside the number
its registers and shared memory allow: achieved occupancy in blocks, which the device machines have no profiler to
report. --shapes limits attention to some shapes, --variants the Triton kernel's variants. --gluon adds the Gluon
kernels: for fp8 perftests/kernels/matmul_gluon.py (one warpgroup's promotion adds under the other's MMAs), for
attention lab/attention_gluon_schedules.py (each block's softmax under one of the tensor cores' MMAs) at each of
its tiles and schedules, or those whose side name contains one of the PARTs given. --sustained also runs each side
alone, back to back for SECONDS as a training loop would (CUDA graphs of a batch of calls, no L2 flush), and reports
its time a call there, its energy a call (NVML's counter), the SM clock and the share of the time the power cap held
the clocks: on a card at its power cap the faster kernel is the one that spends less energy a call. What each
predicted and what it measured belongs in docs/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FP8_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "promote_every_2": {"promote_every": 2},
    "promote_every_4": {"promote_every": 4},
    "warp_specialize": {"warp_specialize": True},
    "two_blocks_per_sm": {"blocks_per_sm": 2},
}
# warp_specialize compiles to the default's PTX on sm_90 with Triton 3.6 and 3.7 (lab/codegen_probe.py): kept as an
# A/A control, what two sides with nothing changed differ by in this run.
FP8_SWEPT = ("default", "two_blocks_per_sm")  # --sweep: every config of these, and the extra ones below
# 64x128x128 at 4 warps: 153 registers and 96-112 KiB of shared memory, so 2 programs fit an SM (codegen_probe), and
# one program's promotion adds can run under the other's MMAs (what cuBLAS gets from two consumer warpgroups).
FP8_EXTRA_CONFIGS = [{"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": st}
                     for st in (3, 4)]
ATTENTION_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},  # fold and heavy_first on (since 2026-11-23), the kernel's one tile
    "unfolded": {"fold": False, "heavy_first": False},  # the kernel as it was before them
    "no_heavy_first": {"heavy_first": False},  # causal only: what launching the long row blocks first adds
    "warp_specialize": {"warp_specialize": True},
    # Half of each block's exponentials by polynomial on the FMA units, half on the special-function unit, whose
    # 16 a clock an SM is what the softmax's time tracks (no_softmax below; FlashAttention-4's trick).
    "exp2_split": {"exp2_split": True},
    # acc and l_i rescaled only when a row's maximum grew past 2^8 (FlashAttention-4): D multiplies a row per key
    # block fewer, for one block-wide reduction.
    "lazy_rescale": {"lazy_rescale": True},
}
# Timed beside the others, never checked: wrong by design. no_softmax is the kernel's loop with its MMAs and loads
# alone (flash_attention(softmax=False): same waits, registers and barriers in the PTX, no softmax between), so
# default minus no_softmax is what the softmax adds to each key block that the MMAs do not hide.
ATTENTION_DIAGNOSTICS: dict[str, dict[str, Any]] = {"no_softmax": {"softmax": False}}
# --sweep: the default variant at every candidate tile (attention_variants.tile_configs(), the autotuner's old race) and at these
# too: fewer stages or narrower key blocks, so that more blocks fit on an SM at D=128 (lab/codegen_probe.py: the
# race's D=128 tiles hold 1-2 blocks an SM, 64x64 at D=64 holds 3-4). 64x64 at one stage (no prefetch of the next
# key block: 48 KiB at D=128, so 3 blocks an SM by registers) asks whether residency buys more than the pipeline.
ATTENTION_EXTRA_CONFIGS = [{"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
                           for bm, bn, w, st in [(64, 64, 4, 2), (64, 64, 4, 1), (64, 32, 4, 3), (64, 32, 4, 4),
                                                 (128, 64, 8, 2)]]
BATCH_MS = 20.0  # device time of one timed batch
DEVICE = "cuda"
FP8_SIZES = (4096, 8192)
ATTENTION_TOKENS, ATTENTION_WIDTH = 16384, 1024  # B x S tokens and H x D per token, as in the suite's cases
ATTENTION_SHAPES = [(seq, head_dim, causal) for seq in (2048, 8192) for head_dim in (64, 128) for causal in (False, True)]


def shape_label(seq: int, head_dim: int, causal: bool) -> str:
    """As the suite's case ids write an attention shape: 8192-128-causal."""
    return f"{seq}-{head_dim}-{'causal' if causal else 'full'}"


def residency(records: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    """Achieved thread blocks per SM from each program's (start ns, end ns, SM), as flash_attention(trace=) records
    them. While programs are still waiting to launch (from the first start to the last start) an SM holds as many
    as fit; the time-weighted mean of how many each SM held over that window, averaged over the SMs, is the achieved
    residency, beside the most any SM held at once. tail: the share of the kernel's span after the last program
    started (the last wave running out); program_us: the median program's duration; clock_ns: the smallest step
    of the device clock seen (its resolution, as far as these stamps show it)."""
    if not records:
        raise ValueError("no programs recorded")
    starts = [r[0] for r in records]
    first, last_start, end = min(starts), max(starts), max(r[1] for r in records)
    if any(b < a for a, b, _ in records):
        raise ValueError("a program ended before it started: not a trace of this kernel")
    by_sm: dict[int, list[tuple[int, int]]] = {}
    for a, b, sm in records:
        by_sm.setdefault(sm, []).extend([(a, 1), (b, -1)])
    window = last_start - first
    means, most = [], 0
    for events in by_sm.values():
        events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same stamp: a block freed, then reused
        held, area, at = 0, 0, first
        for t, step in events:
            clipped = min(max(t, first), last_start)
            area += held * (clipped - at)
            at = clipped
            held += step
            most = max(most, held)
        means.append(area / window if window else float("nan"))
    stamps = sorted({t for r in records for t in r[:2]})
    steps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    return {"resident_mean": sum(means) / len(means), "resident_max": most, "sms": len(by_sm),
            "tail": (end - last_start) / (end - first) if end > first else 0.0,
            "program_us": statistics.median(b - a for a, b, _ in records) / 1e3, "span_us": (end - first) / 1e3,
            "clock_ns": min(steps) if steps else None}


def interleaved_ms(timer: Any, sides: dict[str, Callable[[], Any]], rounds: int, graph: bool) -> dict[str, list[float]]:
    """Each side's batch median in each of `rounds` rounds, the sides in a new random order every round (seeded);
    with graph, each side replayed from a CUDA graph of one call (a side that cannot be captured is timed as it is).

    Shuffled, not rotated: rotating keeps every side behind the same neighbour, and on a power-capped H100 (fp8
    8192^3, 2026-11-23) the side always run after the fast-accumulation cuBLAS kernel read 0.66x of _scaled_mm
    where the same kernel, same config, elsewhere in the order read 0.78x."""
    if graph:
        sides = dict(sides)
        for name, fn in list(sides.items()):
            try:
                sides[name] = timer.graphed(fn)
            except Exception as exc:  # reported: its time includes its launch
                print(json.dumps({"side": name, "graph": f"not captured, timed ungraphed: {type(exc).__name__}: {exc}"[:300]}), flush=True)
    names = list(sides)
    per_call = {name: statistics.median(timer.time_each([sides[name]] * 5)) for name in names}
    batches: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(0)
    for _ in range(rounds):
        for name in order.sample(names, len(names)):
            n = max(5, min(200, int(BATCH_MS / max(per_call[name], 1e-3))))
            batches[name].append(statistics.median(timer.time_each([sides[name]] * n)))
    return batches


SUSTAIN_BATCH_MS = 20.0  # device time of one graph replay in --sustained
SUSTAIN_SETTLE_S = 1.0  # run each side this long before the window opens: time to settle at the power cap


def sustained(timer: Any, sides: dict[str, Callable[[], Any]], per_call_ms: dict[str, float],
              seconds: float) -> dict[str, dict[str, Any]]:
    """Each side alone, back to back: a CUDA graph of enough calls for SUSTAIN_BATCH_MS replayed for SUSTAIN_SETTLE_S,
    then for `seconds` with NVML's energy counter, power-cap time and SM clock read across the window (energy_row)."""
    import torch

    from speedgate.gpu_state import open_monitor
    from speedgate.hardware import visible_gpu_tokens

    tokens = visible_gpu_tokens()
    monitor = open_monitor(tokens[0] if tokens else "0")
    if monitor is None:
        sys.exit("vendor_gap_probe --sustained: needs NVML (pynvml) to read the card's energy")
    out: dict[str, dict[str, Any]] = {}
    for name, fn in sides.items():
        calls = max(1, min(500, round(SUSTAIN_BATCH_MS / max(per_call_ms.get(name, 1.0), 1e-3))))
        try:
            replay = timer.graphed(lambda fn=fn, calls=calls: [fn() for _ in range(calls)])
        except Exception as exc:  # reported, not timed: a side out of a graph would time its launches too
            out[name] = {"sustained": f"not captured: {type(exc).__name__}: {exc}"[:300]}
            continue
        out[name] = sustain_one(torch, monitor, replay, calls, seconds)
        del replay
        torch.cuda.empty_cache()
    return out


def sustain_one(torch: Any, monitor: Any, replay: Callable[[], Any], calls: int, seconds: float) -> dict[str, Any]:
    """One side's window: replay (a graph of `calls` calls) timed by events, batch after batch, for `seconds`."""
    from speedgate.gpu_state import throttled_fractions

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def batch() -> float:
        start.record()
        replay()
        end.record()
        torch.cuda.synchronize()
        return float(start.elapsed_time(end))

    began = time.monotonic()
    while time.monotonic() - began < SUSTAIN_SETTLE_S:
        batch()
    energy, violations, began = monitor.energy_mj(), monitor.violations(), time.monotonic()
    batches, clocks = [], []
    while time.monotonic() - began < seconds:
        batches.append(batch())
        clocks.append(monitor.sm_clock_mhz())
    wall = time.monotonic() - began
    after = monitor.energy_mj()
    joules = (after - energy) / 1000 if after is not None and energy is not None else None
    return energy_row(calls, batches, joules, wall, clocks, throttled_fractions(violations, monitor.violations(), wall))


def energy_row(calls: int, batches_ms: Sequence[float], joules: float | None, wall_s: float,
               clocks: Sequence[int | None], throttled: dict[str, float]) -> dict[str, Any]:
    """What sustained() reports of one side: its median time a call, its energy a call (the window's joules over
    its calls: the host's gaps between batches are in it, and `busy` says how small they were), the median SM
    clock, the share of the window the power cap held the clocks."""
    total = calls * len(batches_ms)
    known = [c for c in clocks if c is not None]
    return {"sustained_ms": statistics.median(batches_ms) / calls if batches_ms else None,
            "joules": joules / total if joules is not None and total else None,
            "sm_mhz": statistics.median(known) if known else None,
            "power_capped": throttled.get("power"),
            "busy": sum(batches_ms) / 1000 / wall_s if wall_s > 0 else None}


def resources(tuner: Any, constants: dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config a side ran (the autotuner's last choice, or the one it was given) and what its compiled kernel
    holds (lab/inspect_kernels.py), the variant's constexpr switches telling apart kernels of one config."""
    from lab.inspect_kernels import compiled_for
    from perftests.kernels.common import best_config

    chosen = config or best_config(tuner)
    out: dict[str, Any] = {"config": chosen}
    try:
        if chosen is None:
            raise LookupError("no config: the autotuner has not run")
        compiled = compiled_for(tuner, chosen, constants)
        out.update(regs=compiled.n_regs, spills=compiled.n_spills, smem_kib=compiled.metadata.shared // 1024,
                   smem_bytes=compiled.metadata.shared)
    except Exception as exc:  # a diagnostic: say what could not be read
        out["resources"] = f"{type(exc).__name__}: {exc}"
    return out


def rel_l2(actual: Any, exact: Any) -> float:
    return float((actual.float() - exact).norm() / exact.norm())


FP8_CONSTANTS = {"promote_every": "PROMOTE_TILES", "warp_specialize": "WARP_SPECIALIZE"}  # blocks_per_sm: NUM_SMS
ATTENTION_CONSTANTS = {"fold": "FOLD", "heavy_first": "HEAVY_FIRST", "warp_specialize": "WARP_SPECIALIZE",
                       "softmax": "SOFTMAX", "exp2_split": "EXP2_SPLIT", "lazy_rescale": "LAZY_RESCALE"}


def constants_of(variant: dict[str, Any], names: dict[str, str], tuner: Any) -> dict[str, Any]:
    """A variant's switches as the kernel's constexpr arguments, the kernel's own defaults for those it leaves
    unset (they tell compiled kernels apart)."""
    import inspect

    declared = inspect.signature(tuner.fn.fn).parameters  # the @triton.jit function's own (compiled or interpreted)
    return {const: variant[switch] if switch in variant else declared[const].default for switch, const in names.items()}


def add_side(sides: dict[str, Callable[[], Any]], info: dict[str, dict[str, Any]], name: str, run: Callable[[], Any],
             error: Callable[[Any], dict[str, Any]], resources_of: Callable[[], dict[str, Any]]) -> None:
    """Run a side once: if it builds and its error passes (error() raises ValueError when not), time it beside the
    others; else report why and leave it out."""
    try:
        data = error(run())
    except Exception as exc:  # a variant Triton cannot build here, or a wrong result: reported, not timed
        info[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return
    info[name] = {**data, **resources_of()}
    sides[name] = run


Plan = dict[str, tuple[dict[str, Any], "dict[str, Any] | None"]]


def swept(variants: dict[str, dict[str, Any]], names: tuple[str, ...], choices: list[dict[str, Any]], sweep: bool) -> Plan:
    """name -> (variant switches, forced config or None): the variants as the autotuner runs them, and with --sweep
    each of `names` at every candidate config."""
    out: Plan = {name: (v, None) for name, v in variants.items()}
    if sweep:
        for name in names:
            for config in choices:
                label = "x".join(str(config[k]) for k in config if k.startswith("BLOCK")) + f" w{config['num_warps']} s{config['num_stages']}"
                out[f"{name} @ {label}"] = (variants[name], config)
    return out


def emit(rows: list[dict[str, Any]], case: str, info: dict[str, dict[str, Any]], rounds: dict[str, list[float]],
         vendor: str, flops: float) -> None:
    """One row per side: its median, its spread over the rounds ((max - min) / median), and its speed against the
    vendor's as the median of the rounds' ratios (the sides of a round ran next to each other) with their range.
    Two variants whose ranges overlap are not told apart by this run."""
    for name, data in info.items():
        times = rounds.get(name)
        row: dict[str, Any] = {"case": case, "side": name, "ms": None, **data}
        if times:
            ms = statistics.median(times)
            ratios = [v / t for v, t in zip(rounds[vendor], times)]
            row.update(ms=ms, spread=(max(times) - min(times)) / ms, tflops=flops / (ms * 1e-3) / 1e12)
            row[f"vs_{vendor.strip('_')}"] = statistics.median(ratios)
            row[f"vs_{vendor.strip('_')}_range"] = [min(ratios), max(ratios)]
        rows.append(row)
        print(json.dumps(row), flush=True)


def probe_fp8(timer: Any, rounds: int, graph: bool, sweep: bool, gluon: Sequence[str] | None = None,
              sustain: float = 0.0) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n in FP8_SIZES:
        rows += probe_fp8_shape(timer, rounds, n, graph, sweep, gluon, sustain)
    return rows


def probe_fp8_shape(timer: Any, rounds: int, n: int, graph: bool, sweep: bool,
                    gluon: Sequence[str] | None = None, sustain: float = 0.0) -> list[dict[str, Any]]:
    from lab import matmul_variants
    from perftests.kernels import matmul as mm
    from perftests.kernels.common import plain_config
    from perftests.support.matmul import fp8_operands, scaled_mm, scaled_mm_fast

    x8, w8, sx, sw = fp8_operands(DEVICE, n, n, n, 0)
    exact = (x8.float() @ w8.float().t()) * (sx * sw)
    kernel = matmul_variants._matmul_tma_persistent_variant  # every switch at its default: the suite's kernel
    programs = mm.num_sms(x8.device)
    sides: dict[str, Callable[[], Any]] = {}
    info: dict[str, dict[str, Any]] = {}

    def error(out: Any) -> dict[str, Any]:
        return {"rel_l2": rel_l2(out, exact)}

    add_side(sides, info, "_scaled_mm", lambda: scaled_mm(x8, w8, sx, sw), error, dict)
    add_side(sides, info, "_scaled_mm_fast", lambda: scaled_mm_fast(x8, w8, sx, sw), error, dict)
    choices = [plain_config(c) for c in mm.prune(kernel.configs, {"x_ptr": x8})] + FP8_EXTRA_CONFIGS  # as the race
    for name, (variant, config) in swept(FP8_VARIANTS, FP8_SWEPT, choices, sweep).items():
        def run(variant: dict[str, Any] = variant, config: dict[str, Any] | None = config) -> Any:
            return matmul_variants.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw, config=config, **variant)
        add_side(sides, info, name, run, error,
                 lambda variant=variant, config=config: resources(
                     kernel, {**constants_of(variant, FP8_CONSTANTS, kernel), "NUM_SMS": programs * variant.get("blocks_per_sm", 1)},
                     config))
    if gluon is not None:  # the Gluon kernel's forms: promotion adds under the other warpgroup's MMAs
        from lab import matmul_gluon_forms
        from perftests.kernels import matmul_gluon

        tile = {"BLOCK_M": matmul_gluon.BLOCK_M, "BLOCK_N": matmul_gluon.BLOCK_N, "BLOCK_K": matmul_gluon.BLOCK_K,
                "num_warps": 8, "num_stages": matmul_gluon.STAGES}
        for name, form in matmul_gluon_forms.forms().items():
            add_side(sides, info, name, lambda form=form: matmul_gluon_forms.fp8_matmul(x8, w8, sx, sw, **form),
                     error, lambda: {"config": tile})
    rows: list[dict[str, Any]] = []
    timed = interleaved_ms(timer, sides, rounds, graph)
    add_sustained(timer, info, sides, timed, sustain)
    emit(rows, f"fp8 {n}^3", info, timed, "_scaled_mm", 2.0 * n**3)
    return rows


def add_sustained(timer: Any, info: dict[str, dict[str, Any]], sides: dict[str, Callable[[], Any]],
                  timed: dict[str, list[float]], sustain: float) -> None:
    """With --sustained: each timed side's sustained() row into its info (the rounds' median sizes its batches)."""
    if sustain > 0:
        per_call = {name: statistics.median(times) for name, times in timed.items() if times}
        for name, data in sustained(timer, {n: sides[n] for n in per_call}, per_call, sustain).items():
            info[name].update(data)


def gluon_plan(head_dim: int, causal: bool, only: Sequence[str] = ()) -> dict[str, tuple[dict[str, int], str]]:
    """The Gluon kernel's sides (lab/attention_gluon_schedules.py): each candidate tile with each schedule that takes
    it, the single-partition ones (`pv_under`, `lookahead`) at its TILES, the warp-specialized ones (`two_warpgroups`,
    `pingpong`, `two_warpgroups_loader`) at its WARP_SPECIALIZED_TILES; only the sides whose name contains one of
    `only` when it is not empty."""
    from lab import attention_gluon_schedules as ags

    single = tuple(s for s in ags.SCHEDULES if s not in ags.WARP_SPECIALIZED_SCHEDULES)
    plan = {}
    for tiles, schedules in ((ags.TILES, single), (ags.WARP_SPECIALIZED_TILES, ags.WARP_SPECIALIZED_SCHEDULES)):
        for bm, bn, warps, stages in tiles:
            tile = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}
            for schedule in schedules:
                name = f"gluon_{schedule} @ {bm}x{bn} w{warps} s{stages}"
                if not only or any(part in name for part in only):
                    plan[name] = (tile, schedule)
    return plan


def probe_attention(torch: Any, timer: Any, rounds: int, graph: bool, sweep: bool, shapes: Sequence[str] | None = None,
                    traced: bool = False, gluon: Sequence[str] | None = None,
                    kept: Sequence[str] | None = None, sustain: float = 0.0) -> list[dict[str, Any]]:
    """Every shape of ATTENTION_SHAPES (or those named in `shapes`, as shape_label writes them); with `traced`, each
    side of the kernel also runs once recording its programs (flash_attention(trace=)) and its row carries their
    residency() beside the theoretical blocks an SM from its registers and shared memory; with `gluon` (a list,
    perhaps empty, of name parts), the Gluon kernel at each of its tiles and schedules (gluon_plan) is timed beside
    them. `kept` names the Triton kernel's variants to time (all when None)."""
    known = {*ATTENTION_VARIANTS, *ATTENTION_DIAGNOSTICS}
    if kept is not None and set(kept) - known:
        raise ValueError(f"unknown attention variants {sorted(set(kept) - known)}; known: {', '.join(known)}")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lab import attention_variants
    from perftests.kernels import attention as attn

    kernel = attention_variants._attn_fwd_variant  # every switch at its default: the suite's kernel (lab/ptx_diff.py)
    choices = attention_variants.tile_configs()  # the kernel's tile first, then the candidates of the autotuner's old race
    rows: list[dict[str, Any]] = []
    unknown = set(shapes or ()) - {shape_label(*shape) for shape in ATTENTION_SHAPES}
    if unknown:
        raise ValueError(f"unknown attention shapes {sorted(unknown)}; known: "
                         f"{', '.join(shape_label(*shape) for shape in ATTENTION_SHAPES)}")
    for seq, head_dim, causal in ATTENTION_SHAPES:
        if shapes and shape_label(seq, head_dim, causal) not in shapes:
            continue
        B, H = max(1, ATTENTION_TOKENS // seq), max(1, ATTENTION_WIDTH // head_dim)
        g = torch.Generator(device=DEVICE).manual_seed(0)
        dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter's bf16 is not exact
        q, k, v = (torch.randn(B, H, seq, head_dim, generator=g, device=DEVICE, dtype=dtype) for _ in range(3))
        sdpa = lambda q=q, k=k, v=v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731

        def sdpa_flash(q: Any = q, k: Any = k, v: Any = v, causal: bool = causal) -> Any:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        expected = sdpa()

        def error(out: Any, expected: Any = expected) -> dict[str, Any]:
            diff = float((out.float() - expected.float()).abs().max())
            if diff > 0.05:  # the suite's bf16 bound is rtol 1.6e-2 plus a few roundings: far past it
                raise ValueError(f"differs from SDPA by up to {diff:.3g}")
            return {"max_abs_diff": diff}

        sides: dict[str, Callable[[], Any]] = {}
        info: dict[str, dict[str, Any]] = {}
        add_side(sides, info, "sdpa", sdpa, error, dict)
        add_side(sides, info, "sdpa_flash", sdpa_flash, error, dict)
        variants = {name: v for name, v in ATTENTION_VARIANTS.items() if causal or name != "no_heavy_first"}
        variants.update(ATTENTION_DIAGNOSTICS)
        variants = {name: v for name, v in variants.items() if kept is None or name in kept}
        shape = {"HEAD_DIM": head_dim, "CAUSAL": causal}
        extra = [c for c in ATTENTION_EXTRA_CONFIGS if c not in choices]
        plan = swept(variants, ("default",), choices + extra, sweep)
        for name, (variant, config) in plan.items():
            def run(variant: dict[str, Any] = variant, config: dict[str, Any] | None = config, q: Any = q, k: Any = k,
                    v: Any = v, causal: bool = causal) -> Any:
                return attention_variants.flash_attention(q, k, v, causal, config=config, **variant)
            add_side(sides, info, name, run, unchecked if name in ATTENTION_DIAGNOSTICS else error,
                     lambda variant=variant, config=config, shape=shape: resources(
                         kernel, {**constants_of(variant, ATTENTION_CONSTANTS, kernel), **shape}, config))
        for name, (tile, schedule) in (gluon_plan(head_dim, causal, gluon) if gluon is not None else {}).items():
            def run_gluon(tile: dict[str, int] = tile, schedule: str = schedule, q: Any = q, k: Any = k, v: Any = v,
                          causal: bool = causal) -> Any:
                from lab import attention_gluon_schedules

                return attention_gluon_schedules.flash_attention(q, k, v, causal, config=tile, schedule=schedule)
            add_side(sides, info, name, run_gluon, error, lambda tile=tile: {"config": tile})
        label = f"attention {B}x{H}x{seq}x{head_dim}{' causal' if causal else ''}"
        timed = interleaved_ms(timer, sides, rounds, graph)
        add_sustained(timer, info, sides, timed, sustain)
        for name, (variant, config) in plan.items() if traced else ():
            if name in sides:  # built and right: where its programs ran
                info[name].update(traced_residency(torch, attention_variants, q, k, v, causal, variant, config, info[name]))
        emit(rows, label, info, timed, "sdpa", attn.attention_flops(B, H, seq, head_dim, causal))
    return rows


def unchecked(out: Any) -> dict[str, Any]:
    """A diagnostic side's error check: none (it computes something else on purpose); its row says so."""
    return {"diagnostic": "wrong by design, not checked"}


def traced_residency(torch: Any, variants: Any, q: Any, k: Any, v: Any, causal: bool, variant: dict[str, Any],
                     config: dict[str, Any] | None, built: dict[str, Any]) -> dict[str, Any]:
    """One side's programs traced (the second traced call: the first compiles the traced kernel), their residency()
    and the blocks an SM its registers and shared memory allow (lab/codegen_probe.py's occupancy(): the traced
    kernel holds a few registers more for its timestamps; the untraced one's are what `built` reports)."""
    from lab.codegen_probe import occupancy

    tile = built.get("config") or {}
    try:
        programs = variants.program_count(q, tile)
        trace = torch.zeros(3 * programs, dtype=torch.int64, device=q.device)
        for _ in range(2):
            variants.flash_attention(q, k, v, causal, config=config, trace=trace, **variant)
        torch.cuda.synchronize()
        found = residency([tuple(r) for r in trace.view(programs, 3).tolist()])
    except Exception as exc:  # a diagnostic: say why there is none
        return {"residency": f"{type(exc).__name__}: {str(exc)[:200]}"}
    if built.get("regs") is not None and tile:
        found["blocks_per_sm"] = occupancy(built["regs"], tile["num_warps"], built["smem_bytes"])["blocks_per_sm"]
    return found


def summary(rows: list[dict[str, Any]]) -> str:
    """Markdown, one table per case: every timed side by its speed against the vendor (median of the rounds' ratios,
    and their range), fastest first, with its spread, config, registers and spills; a side is marked "beats default"
    only when its whole range lies above the default's (the run's own scatter cannot explain it). Sides that failed
    are listed after the table with why."""
    out: list[str] = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        vs = next((k for r in mine for k in r if k.startswith("vs_") and not k.endswith("_range")), None)
        if vs is None:
            continue
        timed = sorted((r for r in mine if r.get("ms") is not None), key=lambda r: -r[vs])
        default = next((r for r in timed if r["side"] == "default"), None)
        traced = any("resident_mean" in r for r in timed)
        out += [f"### {case}", "", f"| side | ms | {vs} | range | spread | config | registers, spills | |"
                + (" blocks an SM: achieved (most) / possible | tail | program us |" if traced else ""),
                "| --- | ---: | ---: | --- | ---: | --- | --- | --- |" + (" --- | ---: | ---: |" if traced else "")]
        for r in timed:
            low, high = r[f"{vs}_range"]
            beats = (default is not None and r is not default and "diagnostic" not in r
                     and low > default[f"{vs}_range"][1])
            config = r.get("config") or {}
            tile = "x".join(str(v) for k, v in config.items() if k.startswith("BLOCK")) + (
                f" w{config['num_warps']} s{config['num_stages']}" if config else "")
            regs = f"{r['regs']}, {r['spills']}" if r.get("regs") is not None else "-"
            line = (f"| {r['side']}{' (diagnostic)' if 'diagnostic' in r else ''} | {r['ms']:.4g} | {r[vs]:.3f}x | {low:.3f}-{high:.3f} | {r['spread']:.1%} | "
                    f"{tile or '-'} | {regs} | {'beats default' if beats else ''} |")
            if traced and "resident_mean" in r:
                line += (f" {r['resident_mean']:.2f} ({r['resident_max']}) / {r.get('blocks_per_sm', '-')} | "
                         f"{r['tail']:.0%} | {r['program_us']:.1f} |")
            elif traced:
                line += " - | - | - |"
            out.append(line)
        out += sustained_table(mine, vs)
        failed = [r for r in mine if r.get("ms") is None]
        out += [""] + [f"- {r['side']}: {r.get('failed', 'not timed')}" for r in failed] + ([""] if failed else [])
    return "\n".join(out)


def sustained_table(mine: list[dict[str, Any]], vs: str) -> list[str]:
    """The --sustained rows of one case, fastest first, each against the vendor's side at steady state too."""
    held = sorted((r for r in mine if r.get("sustained_ms") is not None), key=lambda r: r["sustained_ms"])
    vendor = next((r for r in held if f"vs_{r['side'].strip('_')}" == vs), None)
    if not held:
        return []
    out = ["", "Sustained, each side alone back to back:", "", f"| side | ms | {vs}, sustained | J a call | SM MHz | power capped | busy |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in held:
        ratio = f"{vendor['sustained_ms'] / r['sustained_ms']:.3f}x" if vendor else "-"
        joules = f"{r['joules']:.4g}" if r.get("joules") is not None else "-"
        capped = f"{r['power_capped']:.0%}" if r.get("power_capped") is not None else "-"
        busy = f"{r['busy']:.0%}" if r.get("busy") is not None else "-"
        clock = f"{r['sm_mhz']:.0f}" if r.get("sm_mhz") is not None else "-"
        out.append(f"| {r['side']} | {r['sustained_ms']:.4g} | {ratio} | {joules} | {clock} | {capped} | {busy} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("fp8", "attention"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-graph", dest="graph", action="store_false", help="time each side's calls as they are")
    parser.add_argument("--sweep", action="store_true", help="also every autotuner config of the main variants")
    parser.add_argument("--shapes", nargs="+", metavar="S-D-MASK",
                        help="attention shapes only these (e.g. 8192-128-full 2048-64-causal)")
    parser.add_argument("--residency", action="store_true",
                        help="attention: trace each kernel side's programs once, report the blocks an SM achieved")
    parser.add_argument("--gluon", nargs="*", metavar="PART",
                        help="also the Gluon kernels: fp8's two-warpgroup precise matmul; attention's (softmax under the "
                             "tensor cores) at each tile and schedule, or only the sides whose name contains a PART "
                             "(e.g. pv_under 'two_warpgroups @ 128x128')")
    parser.add_argument("--variants", nargs="+", metavar="NAME",
                        help="attention: only these of the Triton kernel's variants (e.g. default no_softmax)")
    parser.add_argument("--sustained", type=float, default=0.0, metavar="SECONDS",
                        help="also run each side alone back to back this long: its time, energy a call, SM clock and "
                             "power-cap share at steady state")
    args = parser.parse_args()

    import torch

    from speedgate.timers import CudaTimer

    if not torch.cuda.is_available():
        sys.exit("vendor_gap_probe: needs a CUDA GPU (the variants are Hopper experiments)")
    timer = CudaTimer(torch)
    rows: list[dict[str, Any]] = []
    if args.only in (None, "fp8"):
        rows += probe_fp8(timer, args.rounds, args.graph, args.sweep, args.gluon, args.sustained)
    if args.only in (None, "attention"):
        rows += probe_attention(torch, timer, args.rounds, args.graph, args.sweep, args.shapes, args.residency,
                                args.gluon, args.variants, args.sustained)
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))
    print(summary(rows))


if __name__ == "__main__":
    main()
