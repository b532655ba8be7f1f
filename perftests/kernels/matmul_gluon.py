"""FP8 (e4m3) matmul with precise accumulation for Hopper in Gluon: the promotion adds of one warpgroup run under
the other warpgroup's MMAs.

Precise accumulation (torch._scaled_mm's default) adds each K tile's MMA result into an fp32 accumulator: the
tensor cores accumulate fp8 products in reduced precision, so the sum is promoted every BLOCK_K products. The adds
read the MMA's result registers, so within one warpgroup they wait for it: the Triton kernel (matmul.py) stalls its
tensor cores for every promotion (ptxas notes C7517/C7514: lab/codegen_probe.py fp8-matmul). cuBLAS hides them with
two consumer warpgroups; so does this kernel, through Gluon's warp_specialize: each program computes a BLOCK_M x
BLOCK_N tile of y as two warpgroups of BLOCK_M / 2 rows, both reading one ring of K tiles (x's BLOCK_M x BLOCK_K and
w's BLOCK_N x BLOCK_K, by TMA). Per K tile each warpgroup issues its MMAs into a zeroed partial sum, one half of
BLOCK_N at a time (the registers hold the accumulator and one partial), waits, and adds; meanwhile the other
warpgroup's MMAs keep the tensor cores busy. A one-warp loader partition refills the ring, a slot once both consumers
have released it. The grid is persistent, one program an SM looping over output tiles in grouped order: the loader
fetches the next tile's first K tiles while the consumers store this one's output. How this form compares with
_scaled_mm and with the forms it was chosen from (lab/matmul_gluon_forms.py, built from this module's blocks, which
are public for it: grouped_tile_offsets, Fp8Program, mma_halves, send_output, store_halves, half_layout, consumer,
loader, allocate): docs/results/vendor-gap.md.

y = (x @ w^T) * scale_x * scale_w in bf16, x (M, K) and w (N, K) e4m3, K-major, as matmul.matmul_tma_persistent
takes them. Gluon has no interpreter: tests compile it for sm_90 on the CPU; the GPU runs it.
"""

# No `from __future__ import annotations`: Triton's aggregates check each field against its annotation's class.

import functools
from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .gluon_common import CONSUMER_REGS, LOADER_REGS, Ring, aggregate

BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 128  # two warpgroups of BLOCK_M / 2 rows; BLOCK_N as two MMA halves
STAGES = 3  # 48 KiB a stage; the output tiles take 64 KiB more
GROUP_M = 8  # row tiles that share each column tile of w while it is in L2


@gluon.jit
def grouped_tile_offsets(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The first row and column of output tile `tile` in grouped order: GROUP_M row blocks share each column block
    of w while it is in L2."""
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    group_size = gl.minimum(num_pid_m - first_m, GROUP_M)
    return (first_m + (tile % in_group) % group_size) * BLOCK_M, ((tile % in_group) // group_size) * BLOCK_N


@aggregate
class Fp8Program:
    """What every partition of a program reads: the TMA descriptors; the ring of K tiles in shared memory (a slot
    holds x's and w's tiles of one K step) and the output buffers; the scales; the output tiles the program computes
    (range(first_tile, end_tile, tile_step): the persistent grid's stride) and their K tiles; the tile sizes (the
    descriptors' block shapes)."""

    x_desc: tma.tensor_descriptor
    w_desc: tma.tensor_descriptor
    y_desc: tma.tensor_descriptor
    x_smem: gl.shared_memory_descriptor
    w_smem: gl.shared_memory_descriptor
    y_smem: gl.shared_memory_descriptor
    ring: Ring
    scale_x_ptr: gl.tensor
    scale_w_ptr: gl.tensor
    first_tile: gl.tensor
    end_tile: gl.tensor
    tile_step: gl.tensor
    k_tiles: gl.tensor
    GROUP_M: gl.constexpr
    BLOCK_M: gl.constexpr
    BLOCK_N: gl.constexpr
    BLOCK_K: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ring, scale_x_ptr, scale_w_ptr, tiles, k_tiles,
                 GROUP_M):
        self.x_desc, self.w_desc, self.y_desc = x_desc, w_desc, y_desc
        self.x_smem, self.w_smem, self.y_smem = x_smem, w_smem, y_smem
        self.ring = ring
        self.scale_x_ptr, self.scale_w_ptr = scale_x_ptr, scale_w_ptr
        self.first_tile, self.end_tile, self.tile_step = tiles
        self.k_tiles = k_tiles
        self.GROUP_M = gl.constexpr(GROUP_M)
        self.BLOCK_M = gl.constexpr(x_desc.block_type.shape[0])
        self.BLOCK_K = gl.constexpr(x_desc.block_type.shape[1])
        self.BLOCK_N = gl.constexpr(w_desc.block_type.shape[0])

    @gluon.jit
    def tile_offsets(self, tile):
        """The first row and column of output tile `tile` (grouped_tile_offsets on y's shape)."""
        return grouped_tile_offsets(tile, gl.cdiv(self.y_desc.shape[0], self.BLOCK_M), gl.cdiv(self.y_desc.shape[1], self.BLOCK_N),
                             self.GROUP_M, self.BLOCK_M, self.BLOCK_N)

    @gluon.jit
    def load_k_tile(self, off_m, off_n, k_tile, slot, pred):
        """K tile k_tile of the output tile at (off_m, off_n), x's and w's, by TMA into ring slot `slot`."""
        bar = self.ring.ready.index(slot)
        mbarrier.expect(bar, self.x_desc.block_type.nbytes + self.w_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(self.x_desc, [off_m, k_tile * self.BLOCK_K], bar, self.x_smem.index(slot), pred=pred)
        tma.async_copy_global_to_shared(self.w_desc, [off_n, k_tile * self.BLOCK_K], bar, self.w_smem.index(slot), pred=pred)


@gluon.jit
def mma_halves(a, b, acc0, acc1, zero):
    """One K tile of a warpgroup's rows as two MMA halves of BLOCK_N, each into a zeroed partial (`zero`: its layout;
    use_acc=False ignores its values), waited for and added into its fp32 accumulator."""
    HALF: gl.constexpr = b.shape[0] // 2
    part = warpgroup_mma(a, b.slice(0, HALF).permute((1, 0)), zero, use_acc=False, is_async=True)
    part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
    acc0 = acc0 + part
    part = warpgroup_mma(a, b.slice(HALF, HALF).permute((1, 0)), zero, use_acc=False, is_async=True)
    part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
    acc1 = acc1 + part
    return acc0, acc1


@gluon.jit
def send_output(p, off_m, off_n, WG: gl.constexpr):
    """A warpgroup's two (BLOCK_M / 2, BLOCK_N / 2) output buffers, written, out to y by TMA."""
    fence_async_shared()
    rows: gl.constexpr = p.BLOCK_M // 2
    tma.async_copy_shared_to_global(p.y_desc, [off_m + rows * WG, off_n], p.y_smem.index(2 * WG))
    tma.async_copy_shared_to_global(p.y_desc, [off_m + rows * WG, off_n + p.BLOCK_N // 2], p.y_smem.index(2 * WG + 1))


@gluon.jit
def store_halves(p, acc0, acc1, scale, off_m, off_n, WG: gl.constexpr):
    """A warpgroup's rows of an output tile, scaled, into its two output buffers once the previous tile's stores
    have left them, and out."""
    tma.store_wait(pendings=0)
    p.y_smem.index(2 * WG).store((acc0 * scale).to(p.y_desc.dtype))
    p.y_smem.index(2 * WG + 1).store((acc1 * scale).to(p.y_desc.dtype))
    send_output(p, off_m, off_n, WG)


@gluon.constexpr_function
def half_layout(half_n):
    """The warpgroup MMA layout of a (BLOCK_M / 2, half_n) fp32 result: 4 warps stacked along the rows, 16 rows a
    warp, K 32 an instruction (8-bit operands)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, half_n, 32])


@gluon.jit
def consumer(p, WG: gl.constexpr):
    """Consumer warpgroup WG: rows [BLOCK_M / 2 WG, BLOCK_M / 2 (WG + 1)) of each of the program's output tiles. Per
    K tile, mma_halves, then the slot released (both warpgroups arrive); the tile's output stored by TMA, draining under
    the next tile's MMAs. The ring's position runs on across the tiles."""
    ROWS: gl.constexpr = p.BLOCK_M // 2
    HALF: gl.constexpr = p.BLOCK_N // 2
    acc_layout: gl.constexpr = half_layout(HALF)
    zero = gl.zeros([ROWS, HALF], gl.float32, layout=acc_layout)
    scale = gl.load(p.scale_x_ptr) * gl.load(p.scale_w_ptr)
    done = 0  # K tiles consumed before this output tile: the ring's position
    for tile in range(p.first_tile, p.end_tile, p.tile_step):
        off_m, off_n = p.tile_offsets(tile)
        acc0 = gl.zeros([ROWS, HALF], gl.float32, layout=acc_layout)
        acc1 = gl.zeros([ROWS, HALF], gl.float32, layout=acc_layout)
        for i in range(p.k_tiles):
            slot = p.ring.wait_ready(done + i)
            acc0, acc1 = mma_halves(p.x_smem.index(slot).slice(ROWS * WG, ROWS), p.w_smem.index(slot), acc0, acc1, zero)
            p.ring.release(slot)
        done += p.k_tiles
        store_halves(p, acc0, acc1, scale, off_m, off_n, WG)
    tma.store_wait(pendings=0)


@gluon.jit
def loader(p):
    """The loader partition (one warp): every K tile of each of the program's output tiles into the ring, a slot
    refilled once both consumers released it; the next tile's first K tiles load while the consumers store."""
    done = 0
    for tile in range(p.first_tile, p.end_tile, p.tile_step):
        off_m, off_n = p.tile_offsets(tile)
        for i in range(p.k_tiles):
            slot = p.ring.wait_empty(done + i)
            p.load_k_tile(off_m, off_n, i, slot, True)
        done += p.k_tiles


@gluon.jit
def allocate(x_desc, w_desc, y_desc, STAGES: gl.constexpr):
    """The ring's K tiles and barriers (ready: one arrival, TMA's bytes; empty: both consumers) and the output
    buffers: one (BLOCK_M / 2, BLOCK_N / 2) tile per consumer warpgroup and half, [2 WG x 2 halves]."""
    x_smem = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_smem = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    y_smem = gl.allocate_shared_memory(y_desc.dtype, [4] + y_desc.block_type.shape, y_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    return x_smem, w_smem, y_smem, Ring(ready, empty, STAGES)


@gluon.jit
def _fp8_matmul_kernel(x_desc, w_desc, y_desc, scale_x_ptr, scale_w_ptr, M, N, K, STAGES: gl.constexpr,
                       GROUP_M: gl.constexpr):
    # Persistent: tiles pid, pid + programs, ... in grouped order.
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    tiles = (gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0))
    k_tiles = gl.cdiv(K, BLOCK_K)
    x_smem, w_smem, y_smem, ring = allocate(x_desc, w_desc, y_desc, STAGES)
    p = Fp8Program(x_desc, w_desc, y_desc, x_smem, w_smem, y_smem, ring, scale_x_ptr, scale_w_ptr, tiles, k_tiles,
                   GROUP_M)
    # The two consumers (the default partition, and a worker of a warpgroup) and the loader (one warp).
    gl.warp_specialize([(consumer, (p, 0)), (consumer, (p, 1)), (loader, (p,))], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# The TMA tiles of x, w and y: block shape and element type (y by quarter tiles: a warpgroup's rows, half the columns).
TMA_TILES = {"x": ([BLOCK_M, BLOCK_K], gl.float8e4nv), "w": ([BLOCK_N, BLOCK_K], gl.float8e4nv),
             "y": ([BLOCK_M // 2, BLOCK_N // 2], gl.bfloat16)}


@functools.cache
def _layouts() -> tuple[tuple[str, Any], ...]:
    return tuple((name, gl.NVMMASharedLayout.get_default_for(shape, dtype)) for name, (shape, dtype) in TMA_TILES.items())


def layouts() -> dict[str, Any]:
    """The shared-memory layouts of the x, w and y tiles (TMA and the MMAs read them). Computed once: get_default_for
    costs host time at every launch, as much as the JIT launch itself (docs/results/vendor-gap.md)."""
    return dict(_layouts())


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def checked_output(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, scale_w: torch.Tensor,
                   out: torch.Tensor | None) -> torch.Tensor:
    """Refuse operands the kernel cannot take (with the reason); the output tensor to write."""
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
    return y


def descriptors(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> list[Any]:
    """The TMA descriptors of x, w and y at TMA_TILES, in shared layouts()."""
    shared = layouts()
    return [TensorDescriptor.from_tensor(t, TMA_TILES[name][0], shared[name]) for name, t in (("x", x), ("w", w), ("y", y))]


def fp8_matmul(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, scale_w: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """(x @ w^T) * scale_x * scale_w in bf16 with precise (every K tile) accumulation, on a Hopper GPU. x (M, K)
    and w (N, K) e4m3 contiguous; scales fp32 scalars on the device; M a multiple of BLOCK_M, N of BLOCK_N, K of
    BLOCK_K. One program an SM, each looping over output tiles."""
    y = checked_output(x, w, scale_x, scale_w, out)
    M, N = y.shape
    K = x.shape[1]
    grid = (min(triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N), sm_count(x.device)),)
    _fp8_matmul_kernel[grid](*descriptors(x, w, y), scale_x, scale_w, M, N, K, STAGES=STAGES, GROUP_M=GROUP_M, num_warps=4)
    return y


def signature() -> dict[str, str]:
    """The kernel's argument types for compiling it without tensors (perftests/support/gluon_build.py, the lab)."""
    shared = layouts()
    descs = {f"{name}_desc": f"tensordesc<{dtype}[{shape[0]},{shape[1]}],{shared[name]!r}>"
             for name, (shape, dtype) in TMA_TILES.items()}
    return {**descs, "scale_x_ptr": "*fp32", "scale_w_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
