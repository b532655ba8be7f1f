"""The persistent TMA matmul's variants (the vendor-gap probe's fp8 sides): the suite's kernel (perftests/kernels/
matmul.py) with a promotion every n K tiles, warp specialization of its tile loop, its tile loop flattened into the K
loop, n programs an SM, or one config without the autotuner's race. Built from the suite's public blocks
(tile_offsets, k_tile, store_tile, its tile_configs, prune and set_tma_block_shapes); with every switch at its default
it compiles to the suite kernel's PTX (lab/ptx_diff.py checks it).
What each variant measured is on the vendor-gap results page (docs/results/vendor-gap.md).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from lab.sweep import run_config
from perftests.kernels import matmul as mm


@triton.jit
def _k_loop_promoted(x_desc, w_desc, off_m, off_n, k_tiles, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PROMOTE_TILES: tl.constexpr):
    """The K loop with the MMAs accumulating PROMOTE_TILES K tiles in their own precision (reduced, for fp8) before
    the partial sum is added into the fp32 accumulator: a promotion every PROMOTE_TILES * BLOCK_K products."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_tiles):
        x, w = mm.k_tile(x_desc, w_desc, off_m, off_n, ki, BLOCK_K)
        part = tl.dot(x, w.T, part)
        if ki % PROMOTE_TILES == PROMOTE_TILES - 1:
            acc += part
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    return acc + part


# A kernel of its own, not a hook on the suite's: the switches change the suite kernel's loops themselves. It repeats
# the suite kernel's loop structure around the suite's blocks.
@triton.autotune(configs=mm.tile_configs(mm.set_tma_block_shapes),
                 key=["M", "N", "K", *mm.EPILOGUE_KEYS, "PROMOTE_TILES", "WARP_SPECIALIZE", "FLATTEN"],
                 prune_configs_by={"early_config_prune": mm.prune})
@triton.jit
def _matmul_tma_persistent_variant(
    x_desc, w_desc, y_desc, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr, M, N, K,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROW_SCALE: tl.constexpr,
    FP8_PRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
    PROMOTE_TILES: tl.constexpr = 1, WARP_SPECIALIZE: tl.constexpr = False, FLATTEN: tl.constexpr = False,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, warp_specialize=WARP_SPECIALIZE, flatten=FLATTEN):
        off_m, off_n = mm.tile_offsets(tile_id, num_pid_m, num_pid_in_group, BLOCK_M, BLOCK_N, GROUP_M)
        if PROMOTE_TILES > 1:
            acc = _k_loop_promoted(x_desc, w_desc, off_m, off_n, k_tiles, BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_TILES)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for ki in range(k_tiles):
                x, w = mm.k_tile(x_desc, w_desc, off_m, off_n, ki, BLOCK_K)
                if FP8_PRECISE:
                    acc = tl.dot(x, w.T, acc, max_num_imprecise_acc=BLOCK_K)
                else:
                    acc = tl.dot(x, w.T, acc)
        mm.store_tile(acc, y_desc, off_m, off_n, M, N, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
                       HAS_BIAS, ACTIVATION, HAS_SCALE, HAS_ROW_SCALE, BLOCK_M, BLOCK_N)


def matmul_tma_persistent(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    *,
    scale_x: torch.Tensor | None = None,
    scale_w: torch.Tensor | None = None,
    row_scale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
    fp8_fast_accum: bool = False,
    promote_every: int = 1,
    warp_specialize: bool = False,
    flatten: bool = False,
    blocks_per_sm: int = 1,
    config: dict[str, Any] | None = None,
) -> torch.Tensor:
    """The suite's mm.matmul_tma_persistent with its variants; every default is the suite kernel's own form.

    promote_every=n > 1 adds the MMAs' partial sums into the fp32 accumulator every n K tiles instead of every tile
    (a precision trade for fp8: n * BLOCK_K products in the MMAs' reduced precision); warp_specialize=True asks
    Triton to split the tile loop into producer (TMA) and consumer (MMA) warps; blocks_per_sm=n launches n
    persistent programs an SM (with a tile small enough for n to fit, one program's promotion adds can run under
    another's MMAs); config= runs one of the autotuner's configs (as best_config() gives it) without the race."""
    if promote_every < 1:
        raise ValueError(f"promote_every must be a positive number of K tiles, got {promote_every}")
    if blocks_per_sm < 1:
        raise ValueError(f"blocks_per_sm must be a positive number of programs an SM, got {blocks_per_sm}")
    y, args, flags = mm.tma_arguments(x, w, bias, activation, scale_x, scale_w, row_scale, out_dtype, out, fp8_fast_accum)
    M, N = y.shape
    sms = mm.num_sms(x.device) * blocks_per_sm  # persistent programs: the grid, and the stride of their tile loop
    grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    switches = dict(**flags, NUM_SMS=sms, PROMOTE_TILES=promote_every, WARP_SPECIALIZE=warp_specialize,
                    FLATTEN=flatten)
    if config is None:
        _matmul_tma_persistent_variant[grid](*args, **switches)
    else:
        run_config(_matmul_tma_persistent_variant, grid, config, *args, **switches)
    return y
