"""FP8 (e4m3) matmul with precise accumulation for Hopper in Gluon: the promotion adds of one warpgroup run under
the other warpgroup's MMAs.

Precise accumulation (torch._scaled_mm's default) adds each K tile's MMA result into an fp32 accumulator: the
tensor cores accumulate fp8 products in reduced precision, so the sum is promoted every BLOCK_K products. The adds
read the MMA's result registers, so within one warpgroup they wait for it: the Triton kernel (matmul.py) stalls its
tensor cores for every promotion (ptxas C7517/C7514, docs/NOTES.md, fifth session). cuBLAS hides them with two
consumer warpgroups; so does this kernel, through Gluon's warp_specialize: each program computes a 128 x 256 tile
of y as two warpgroups of 64 rows, both reading one ring of K tiles (x's 128 x 128 and w's 256 x 128, by TMA). Per
K tile each warpgroup issues its MMAs into a zeroed partial sum (two 64 x 128 halves, one at a time: the registers
hold two 64 x 128 fp32 accumulators and one partial), waits, and adds; meanwhile the other warpgroup's MMAs keep
the tensor cores busy. A one-warp loader partition refills the ring, a slot once both have released it (without it,
warpgroup 0 refills and waits for warpgroup 1 first: 16-20% slower on the H100, one run). The grid is persistent,
one program an SM looping over output tiles in grouped order: the loader fetches the next tile's first K tiles
while the consumers store this one's output (0.96x -> 1.03x of _scaled_mm at 4096^3, 0.93-0.97x -> 0.98-0.99x at
8192^3 on the H100, ninth session).

y = (x @ w^T) * scale_x * scale_w in bf16, x (M, K) and w (N, K) e4m3, K-major, as matmul.matmul_tma_persistent
takes them. Gluon has no interpreter: tests compile it for sm_90 on the CPU; the GPU runs it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 128  # two warpgroups of 64 rows; 256 columns as two MMA halves of 128
STAGES = 3  # 48 KiB a stage; the output tiles take 64 KiB more


@gluon.jit
def _load_stage(x_desc, w_desc, x_smem, w_smem, ready, off_m, off_n, k_tile, slot, pred):
    bar = ready.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [off_m, k_tile * 128], bar, x_smem.index(slot), pred=pred)
    tma.async_copy_global_to_shared(w_desc, [off_n, k_tile * 128], bar, w_smem.index(slot), pred=pred)


@gluon.jit
def _promote_quarters(a, b, acc0, acc1, acc2, acc3, s0, s1):
    """One K tile of a 64 x 256 accumulator as four 64 x 64 MMAs, two in flight: each partial is waited for (the
    newer one still running) and added while the next MMA runs. s0, s1: two spent partials whose registers the
    first two MMAs overwrite (use_acc=False ignores their values; a zero tensor would hold 32 registers more)."""
    p0 = warpgroup_mma(a, b.slice(0, 64).permute((1, 0)), s0, use_acc=False, is_async=True)
    p1 = warpgroup_mma(a, b.slice(64, 64).permute((1, 0)), s1, use_acc=False, is_async=True)
    p0 = warpgroup_mma_wait(num_outstanding=1, deps=(p0,))
    acc0 = acc0 + p0
    p2 = warpgroup_mma(a, b.slice(128, 64).permute((1, 0)), p0, use_acc=False, is_async=True)
    p1 = warpgroup_mma_wait(num_outstanding=1, deps=(p1,))
    acc1 = acc1 + p1
    p3 = warpgroup_mma(a, b.slice(192, 64).permute((1, 0)), p1, use_acc=False, is_async=True)
    p2 = warpgroup_mma_wait(num_outstanding=1, deps=(p2,))
    acc2 = acc2 + p2
    p3 = warpgroup_mma_wait(num_outstanding=0, deps=(p3,))
    acc3 = acc3 + p3
    return acc0, acc1, acc2, acc3, p2, p3


@gluon.jit
def _fp8_consumer(x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ready, empty, scale_x_ptr, scale_w_ptr, tiles,
                  k_tiles, STAGES: gl.constexpr, GROUP_M: gl.constexpr, QUARTERS: gl.constexpr, LOADER: gl.constexpr,
                  WG: gl.constexpr):
    """Rows [64 WG, 64 WG + 64) of the program's tile. Per K tile, halves: two 64 x 128 MMAs from shared memory
    into a zeroed partial, each waited for and added into its fp32 accumulator (one MMA in flight); QUARTERS: four
    64 x 64 MMAs, two in flight (_promote_quarters). Then the slot is released (empty: both warpgroups arrive) and
    warpgroup 0 refills the slot the previous K tile used once both released it (LOADER: a loader partition does,
    and neither consumer loads). tiles: (first, end, step) of the output tiles this program computes, one unless
    the grid is persistent (LOADER only); the ring's position runs on across them, and a tile's output store
    drains under the next tile's MMAs."""
    LOADS: gl.constexpr = WG == 0 and not LOADER
    if QUARTERS:
        q_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 32])
        s0 = gl.zeros([64, 64], gl.float32, layout=q_layout)
        s1 = gl.zeros([64, 64], gl.float32, layout=q_layout)
    else:
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, 128, 32])
        zero = gl.zeros([64, 128], gl.float32, layout=acc_layout)
    scale = gl.load(scale_x_ptr) * gl.load(scale_w_ptr)
    done = 0  # K tiles consumed before this output tile: the ring's position
    for tile in range(tiles[0], tiles[1], tiles[2]):
        off_m, off_n = _tile_offsets(tile, gl.cdiv(y_desc.shape[0], 128), gl.cdiv(y_desc.shape[1], 256), GROUP_M)
        if QUARTERS:
            acc0 = gl.zeros([64, 64], gl.float32, layout=q_layout)
            acc1 = gl.zeros([64, 64], gl.float32, layout=q_layout)
            acc2 = gl.zeros([64, 64], gl.float32, layout=q_layout)
            acc3 = gl.zeros([64, 64], gl.float32, layout=q_layout)
        else:
            acc0 = gl.zeros([64, 128], gl.float32, layout=acc_layout)
            acc1 = gl.zeros([64, 128], gl.float32, layout=acc_layout)
        for i in range(k_tiles):
            slot = (done + i) % STAGES
            mbarrier.wait(ready.index(slot), ((done + i) // STAGES) & 1)
            a = x_smem.index(slot).slice(64 * WG, 64)  # this warpgroup's rows of x's tile
            b = w_smem.index(slot)
            if QUARTERS:
                acc0, acc1, acc2, acc3, s0, s1 = _promote_quarters(a, b, acc0, acc1, acc2, acc3, s0, s1)
            else:
                part = warpgroup_mma(a, b.slice(0, 128).permute((1, 0)), zero, use_acc=False, is_async=True)
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                acc0 = acc0 + part
                part = warpgroup_mma(a, b.slice(128, 128).permute((1, 0)), zero, use_acc=False, is_async=True)
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                acc1 = acc1 + part
            mbarrier.arrive(empty.index(slot), count=1)
            if LOADS:  # one tile a program here: refill the slot of K tile i - 1 (both warpgroups are likely past it)
                prev = (i + STAGES - 1) % STAGES
                refill = (i > 0) & (i - 1 + STAGES < k_tiles)
                mbarrier.wait(empty.index(prev), ((i - 1) // STAGES) & 1, pred=refill)
                _load_stage(x_desc, w_desc, x_smem, w_smem, ready, off_m, off_n, i - 1 + STAGES, prev, refill)
        done += k_tiles
        tma.store_wait(pendings=0)  # the previous tile's output has left y_smem
        if QUARTERS:  # each 64-column quarter into its half of the (64, 128) output buffers
            y_smem.index(2 * WG).slice(0, 64, dim=1).store((acc0 * scale).to(y_desc.dtype))
            y_smem.index(2 * WG).slice(64, 64, dim=1).store((acc1 * scale).to(y_desc.dtype))
            y_smem.index(2 * WG + 1).slice(0, 64, dim=1).store((acc2 * scale).to(y_desc.dtype))
            y_smem.index(2 * WG + 1).slice(64, 64, dim=1).store((acc3 * scale).to(y_desc.dtype))
        else:
            y_smem.index(2 * WG).store((acc0 * scale).to(y_desc.dtype))
            y_smem.index(2 * WG + 1).store((acc1 * scale).to(y_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(y_desc, [off_m + 64 * WG, off_n], y_smem.index(2 * WG))
        tma.async_copy_shared_to_global(y_desc, [off_m + 64 * WG, off_n + 128], y_smem.index(2 * WG + 1))
    tma.store_wait(pendings=0)


@gluon.jit
def _fp8_loader(x_desc, w_desc, y_desc, x_smem, w_smem, ready, empty, tiles, k_tiles, STAGES: gl.constexpr,
                GROUP_M: gl.constexpr):
    """The loader partition (one warp): every K tile of each of the program's output tiles into the ring, a slot
    refilled once both consumers released it; the next tile's first K tiles load while the consumers store."""
    done = 0
    for tile in range(tiles[0], tiles[1], tiles[2]):
        off_m, off_n = _tile_offsets(tile, gl.cdiv(y_desc.shape[0], 128), gl.cdiv(y_desc.shape[1], 256), GROUP_M)
        for i in range(k_tiles):
            slot = (done + i) % STAGES
            mbarrier.wait(empty.index(slot), (((done + i) // STAGES) - 1) & 1, pred=done + i >= STAGES)
            _load_stage(x_desc, w_desc, x_smem, w_smem, ready, off_m, off_n, i, slot, True)
        done += k_tiles


@gluon.jit
def _tile_offsets(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """The first row and column of output tile `tile` in grouped order: GROUP_M row blocks share each column block
    of w while it is in L2."""
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    group_size = gl.minimum(num_pid_m - first_m, GROUP_M)
    return (first_m + (tile % in_group) % group_size) * 128, ((tile % in_group) // group_size) * 256


@gluon.jit
def _fp8_matmul_kernel(x_desc, w_desc, y_desc, scale_x_ptr, scale_w_ptr, M, N, K, STAGES: gl.constexpr,
                       GROUP_M: gl.constexpr, QUARTERS: gl.constexpr = False, LOADER: gl.constexpr = False,
                       PERSISTENT: gl.constexpr = False):
    # One output tile a program, or (PERSISTENT, with the loader) tiles pid, pid + programs, ... in grouped order.
    pid = gl.program_id(0)
    if PERSISTENT:
        tiles = (pid, gl.cdiv(M, 128) * gl.cdiv(N, 256), gl.num_programs(0))
    else:
        tiles = (pid, pid + 1, 1)
    k_tiles = gl.cdiv(K, 128)

    x_smem = gl.allocate_shared_memory(x_desc.dtype, [STAGES, 128, 128], x_desc.layout)
    w_smem = gl.allocate_shared_memory(w_desc.dtype, [STAGES, 256, 128], w_desc.layout)
    y_smem = gl.allocate_shared_memory(y_desc.dtype, [4, 64, 128], y_desc.layout)  # [2 WG x 2 halves]
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    if LOADER:
        gl.warp_specialize([
            (_fp8_consumer, (x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ready, empty, scale_x_ptr, scale_w_ptr,
                             tiles, k_tiles, STAGES, GROUP_M, QUARTERS, LOADER, 0)),
            (_fp8_consumer, (x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ready, empty, scale_x_ptr, scale_w_ptr,
                             tiles, k_tiles, STAGES, GROUP_M, QUARTERS, LOADER, 1)),
            (_fp8_loader, (x_desc, w_desc, y_desc, x_smem, w_smem, ready, empty, tiles, k_tiles, STAGES, GROUP_M)),
        ], [4, 1], [232, 24])
    else:
        off_m, off_n = _tile_offsets(pid, gl.cdiv(M, 128), gl.cdiv(N, 256), GROUP_M)
        for i in gl.static_range(STAGES):
            _load_stage(x_desc, w_desc, x_smem, w_smem, ready, off_m, off_n, i, i, i < k_tiles)
        gl.warp_specialize([
            (_fp8_consumer, (x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ready, empty, scale_x_ptr, scale_w_ptr,
                             tiles, k_tiles, STAGES, GROUP_M, QUARTERS, LOADER, 0)),
            (_fp8_consumer, (x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ready, empty, scale_x_ptr, scale_w_ptr,
                             tiles, k_tiles, STAGES, GROUP_M, QUARTERS, LOADER, 1)),
        ], [4], [240])


# The TMA tiles of x, w and y: block shape and element type (y by quarter tiles: a warpgroup's rows, half the columns).
TMA_TILES = {"x": ([BLOCK_M, BLOCK_K], gl.float8e4nv), "w": ([BLOCK_N, BLOCK_K], gl.float8e4nv),
             "y": ([BLOCK_M // 2, BLOCK_N // 2], gl.bfloat16)}


@functools.cache
def _layouts() -> tuple[tuple[str, Any], ...]:
    return tuple((name, gl.NVMMASharedLayout.get_default_for(shape, dtype)) for name, (shape, dtype) in TMA_TILES.items())


def layouts() -> dict[str, Any]:
    """The shared-memory layouts of the x, w and y tiles (TMA and the MMAs read them). Computed once: three
    get_default_for calls took 26 us of a 97 us launch on the H100's host (2026-11-24), as long as the JIT launch."""
    return dict(_layouts())


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def fp8_matmul(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, scale_w: torch.Tensor,
               out: torch.Tensor | None = None, *, stages: int = STAGES, group_m: int = 8,
               quarters: bool = False, loader: bool = True, persistent: bool | None = None) -> torch.Tensor:
    """(x @ w^T) * scale_x * scale_w in bf16 with precise (every K tile) accumulation, on a Hopper GPU. x (M, K)
    and w (N, K) e4m3 contiguous; scales fp32 scalars on the device; M a multiple of 128, N of 256, K of 128.
    The kernel's own form: halves, with the loader partition, persistent (one program an SM, each looping over
    output tiles, the next tile's loads under this one's stores; measured fastest on the H100, 2026-11-24).
    quarters=True, loader=False and persistent=False (one program a tile) are the probe's other forms; persistent
    defaults to the loader's setting (a persistent grid needs the loader partition)."""
    if x.dtype != torch.float8_e4m3fn or w.dtype != torch.float8_e4m3fn or x.dim() != 2 or w.dim() != 2:
        raise ValueError(f"x and w must be 2-d float8_e4m3fn; got {x.dtype} {tuple(x.shape)}, {w.dtype} {tuple(w.shape)}")
    M, K = x.shape
    N = w.shape[0]
    if w.shape[1] != K or not (x.is_contiguous() and w.is_contiguous()):
        raise ValueError(f"x (M, K) and w (N, K) must be contiguous with one K; got {tuple(x.shape)}, {tuple(w.shape)}")
    if M % BLOCK_M or N % BLOCK_N or K % BLOCK_K:
        raise ValueError(f"M, N, K must be multiples of {BLOCK_M}, {BLOCK_N}, {BLOCK_K}; got {M}, {N}, {K}")
    if scale_x.numel() != 1 or scale_w.numel() != 1 or scale_x.dtype != torch.float32 or scale_w.dtype != torch.float32:
        raise ValueError("scale_x and scale_w must be fp32 scalars")
    y = out if out is not None else torch.empty(M, N, device=x.device, dtype=torch.bfloat16)
    if y.shape != (M, N) or y.dtype != torch.bfloat16 or not y.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 ({M}, {N}) tensor")
    shared = layouts()
    x_desc, w_desc, y_desc = (TensorDescriptor.from_tensor(t, TMA_TILES[name][0], shared[name])
                              for name, t in (("x", x), ("w", w), ("y", y)))
    persistent = loader if persistent is None else persistent
    if persistent and not loader:
        raise ValueError("persistent=True needs the loader partition (loader=True)")
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    grid = (min(tiles, _sm_count(x.device)) if persistent else tiles,)
    _fp8_matmul_kernel[grid](x_desc, w_desc, y_desc, scale_x, scale_w, M, N, K, STAGES=stages, GROUP_M=group_m,
                             QUARTERS=quarters, LOADER=loader, PERSISTENT=persistent, num_warps=4)
    return y


def signature() -> dict[str, str]:
    """The kernel's argument types for compiling it without tensors (perftests/support/gluon_build.py, the lab)."""
    shared = layouts()
    descs = {f"{name}_desc": f"tensordesc<{dtype}[{shape[0]},{shape[1]}],{shared[name]!r}>"
             for name, (shape, dtype) in TMA_TILES.items()}
    return {**descs, "scale_x_ptr": "*fp32", "scale_w_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
