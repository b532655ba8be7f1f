"""The Gluon fp8 matmul's other forms (the vendor-gap probe's sides): the suite's kernel (perftests/kernels/
matmul_gluon.py: halves, a loader partition, persistent) against its K tiles as four quarter MMAs two in flight,
without the loader partition (consumer warpgroup 0 refills the ring), and one program an output tile. Built from the
suite's public blocks (Fp8Program, its ring, allocate, mma_halves, store_halves, send_output, grouped_tile_offsets,
half_layout, and the suite's own consumer and loader partitions where a form has them). What each form measured is on the vendor-gap results page
(docs/results/vendor-gap.md).
"""

# No `from __future__ import annotations`: the kernels module's aggregates are used here.

from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from perftests.kernels import matmul_gluon as mg
from perftests.kernels.gluon_common import ring_phase, ring_slot

# Registers a thread with two partitions (the two consumer warpgroups, no loader; the derivation of the suite's
# three-partition budget is in perftests/kernels/gluon_common.py): 2 warpgroups, 256 threads, so 65536 / 256 = 256 a
# thread at launch (the PTX's .maxnreg), 512 for a thread of each; the worker consumer asks for 240 and the default
# partition keeps 256, setmaxnreg's most (512 - 240 would be 272).
TWO_CONSUMER_REGS = gl.constexpr(240)


@gluon.jit
def _promote_quarters(a, b, acc0, acc1, acc2, acc3, s0, s1):
    """One K tile of a warpgroup's accumulator as four quarter MMAs of BLOCK_N / 4 columns, two in flight: each
    partial is waited for (the newer one still running) and added while the next MMA runs. s0, s1: two spent
    partials whose registers the first two MMAs overwrite (use_acc=False ignores their values; a zero tensor would
    hold 32 registers more)."""
    Q: gl.constexpr = b.shape[0] // 4
    p0 = warpgroup_mma(a, b.slice(0, Q).permute((1, 0)), s0, use_acc=False, is_async=True)
    p1 = warpgroup_mma(a, b.slice(Q, Q).permute((1, 0)), s1, use_acc=False, is_async=True)
    p0 = warpgroup_mma_wait(num_outstanding=1, deps=(p0,))
    acc0 = acc0 + p0
    p2 = warpgroup_mma(a, b.slice(2 * Q, Q).permute((1, 0)), p0, use_acc=False, is_async=True)
    p1 = warpgroup_mma_wait(num_outstanding=1, deps=(p1,))
    acc1 = acc1 + p1
    p3 = warpgroup_mma(a, b.slice(3 * Q, Q).permute((1, 0)), p1, use_acc=False, is_async=True)
    p2 = warpgroup_mma_wait(num_outstanding=1, deps=(p2,))
    acc2 = acc2 + p2
    p3 = warpgroup_mma_wait(num_outstanding=0, deps=(p3,))
    acc3 = acc3 + p3
    return acc0, acc1, acc2, acc3, p2, p3


@gluon.jit
def _form_consumer(p, WG: gl.constexpr, QUARTERS: gl.constexpr, LOADER: gl.constexpr):
    """The suite's consumer (mg.consumer) with QUARTERS (each K tile as _promote_quarters) and without the loader
    partition (LOADER False: warpgroup 0 refills the slot the previous K tile used once both released it; one tile
    a program, its first STAGES K tiles loaded before the partitions start)."""
    LOADS: gl.constexpr = WG == 0 and not LOADER
    ROWS: gl.constexpr = p.BLOCK_M // 2
    if QUARTERS:
        QUARTER: gl.constexpr = p.BLOCK_N // 4
        q_layout: gl.constexpr = mg.half_layout(QUARTER)
        s0 = gl.zeros([ROWS, QUARTER], gl.float32, layout=q_layout)
        s1 = gl.zeros([ROWS, QUARTER], gl.float32, layout=q_layout)
    else:
        HALF: gl.constexpr = p.BLOCK_N // 2
        acc_layout: gl.constexpr = mg.half_layout(HALF)
        zero = gl.zeros([ROWS, HALF], gl.float32, layout=acc_layout)
    scale = gl.load(p.scale_x_ptr) * gl.load(p.scale_w_ptr)
    done = 0
    for tile in range(p.first_tile, p.end_tile, p.tile_step):
        off_m, off_n = p.tile_offsets(tile)
        if QUARTERS:
            acc0 = gl.zeros([ROWS, QUARTER], gl.float32, layout=q_layout)
            acc1 = gl.zeros([ROWS, QUARTER], gl.float32, layout=q_layout)
            acc2 = gl.zeros([ROWS, QUARTER], gl.float32, layout=q_layout)
            acc3 = gl.zeros([ROWS, QUARTER], gl.float32, layout=q_layout)
        else:
            acc0 = gl.zeros([ROWS, HALF], gl.float32, layout=acc_layout)
            acc1 = gl.zeros([ROWS, HALF], gl.float32, layout=acc_layout)
        for i in range(p.k_tiles):
            slot = p.ring.wait_ready(done + i)
            a = p.x_smem.index(slot).slice(ROWS * WG, ROWS)
            if QUARTERS:
                acc0, acc1, acc2, acc3, s0, s1 = _promote_quarters(a, p.w_smem.index(slot), acc0, acc1, acc2, acc3, s0, s1)
            else:
                acc0, acc1 = mg.mma_halves(a, p.w_smem.index(slot), acc0, acc1, zero)
            p.ring.release(slot)
            if LOADS:  # one tile a program here: refill K tile i - 1's slot (both warpgroups are likely past it)
                prev = ring_slot(i + p.ring.STAGES - 1, p.ring.STAGES)
                refill = (i > 0) & (i - 1 + p.ring.STAGES < p.k_tiles)
                mbarrier.wait(p.ring.empty.index(prev), ring_phase(i - 1, p.ring.STAGES), pred=refill)  # use i - 1 released
                p.load_k_tile(off_m, off_n, i - 1 + p.ring.STAGES, prev, refill)
        done += p.k_tiles
        if QUARTERS:  # each quarter into its half of the warpgroup's two output buffers
            tma.store_wait(pendings=0)
            y0 = p.y_smem.index(2 * WG)
            y1 = p.y_smem.index(2 * WG + 1)
            y0.slice(0, QUARTER, dim=1).store((acc0 * scale).to(p.y_desc.dtype))
            y0.slice(QUARTER, QUARTER, dim=1).store((acc1 * scale).to(p.y_desc.dtype))
            y1.slice(0, QUARTER, dim=1).store((acc2 * scale).to(p.y_desc.dtype))
            y1.slice(QUARTER, QUARTER, dim=1).store((acc3 * scale).to(p.y_desc.dtype))
            mg.send_output(p, off_m, off_n, WG)
        else:
            mg.store_halves(p, acc0, acc1, scale, off_m, off_n, WG)
    tma.store_wait(pendings=0)


@gluon.jit
def _fp8_matmul_form(x_desc, w_desc, y_desc, scale_x_ptr, scale_w_ptr, M, N, K, STAGES: gl.constexpr,
                     GROUP_M: gl.constexpr, QUARTERS: gl.constexpr = False, LOADER: gl.constexpr = True,
                     PERSISTENT: gl.constexpr = True):
    # One output tile a program, or (PERSISTENT, with the loader) tiles pid, pid + programs, ... in grouped order.
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    pid = gl.program_id(0)
    if PERSISTENT:
        tiles = (pid, gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0))
    else:
        tiles = (pid, pid + 1, 1)
    k_tiles = gl.cdiv(K, BLOCK_K)
    x_smem, w_smem, y_smem, ring = mg.allocate(x_desc, w_desc, y_desc, STAGES)
    p = mg.Fp8Program(x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ring, scale_x_ptr, scale_w_ptr, tiles, k_tiles,
                      GROUP_M)
    if LOADER:
        if QUARTERS:
            gl.warp_specialize([(_form_consumer, (p, 0, QUARTERS, LOADER)), (_form_consumer, (p, 1, QUARTERS, LOADER)),
                                (mg.loader, (p,))], [4, 1], [mg.CONSUMER_REGS, mg.LOADER_REGS])
        else:
            gl.warp_specialize([(mg.consumer, (p, 0)), (mg.consumer, (p, 1)), (mg.loader, (p,))], [4, 1],
                               [mg.CONSUMER_REGS, mg.LOADER_REGS])
    else:
        off_m, off_n = mg.grouped_tile_offsets(pid, gl.cdiv(M, BLOCK_M), gl.cdiv(N, BLOCK_N), GROUP_M, BLOCK_M, BLOCK_N)
        for i in gl.static_range(STAGES):
            p.load_k_tile(off_m, off_n, i, i, i < k_tiles)
        gl.warp_specialize([(_form_consumer, (p, 0, QUARTERS, LOADER)), (_form_consumer, (p, 1, QUARTERS, LOADER))],
                           [4], [TWO_CONSUMER_REGS])


def fp8_matmul(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, scale_w: torch.Tensor,
               out: torch.Tensor | None = None, *, stages: int = mg.STAGES, group_m: int = mg.GROUP_M,
               quarters: bool = False, loader: bool = True, persistent: bool | None = None) -> torch.Tensor:
    """The suite's mg.fp8_matmul in any of its forms: quarters=True (four quarter MMAs a K tile, two in flight),
    loader=False (no loader partition), persistent=False (one program a tile); persistent defaults to the loader's
    setting (a persistent grid needs the loader partition). The defaults are the suite's own form."""
    y = mg.checked_output(x, w, scale_x, scale_w, out)
    persistent = loader if persistent is None else persistent
    if persistent and not loader:
        raise ValueError("persistent=True needs the loader partition (loader=True)")
    M, N = y.shape
    K = x.shape[1]
    tiles = triton.cdiv(M, mg.BLOCK_M) * triton.cdiv(N, mg.BLOCK_N)
    grid = (min(tiles, mg.sm_count(x.device)) if persistent else tiles,)
    _fp8_matmul_form[grid](*mg.descriptors(x, w, y), scale_x, scale_w, M, N, K, STAGES=stages, GROUP_M=group_m,
                           QUARTERS=quarters, LOADER=loader, PERSISTENT=persistent, num_warps=4)
    return y


def forms() -> dict[str, dict[str, Any]]:
    """Every form by the probe's side name, as fp8_matmul's keywords."""
    return {f"gluon_{'quarters' if q else 'halves'}{'_loader' if ld else ''}{'_persistent' if ps else ''}":
            {"quarters": q, "loader": ld, "persistent": ps}
            for q in (False, True) for ld, ps in ((False, False), (True, False), (True, True))}
