"""Hopper GEMMs in CUTLASS's Python DSL (CuTe DSL): bf16/fp16, and fp8 (e4m3) with precise accumulation and
per-tensor scales as torch._scaled_mm computes them; their launcher, compiled once per (shape, dtype) and cached.

y = x @ w.T with x (M, K) and w (N, K) row-major (the nn.Linear layout, K contiguous in both: what wgmma and fp8
want), y (M, N) row-major. Work: 2*M*N*K flops; the fewest bytes are (M*K + N*K) * itemsize + M*N * out itemsize.

One kernel class for both, in the shape of CUTLASS's Hopper kernels (warp-specialized, persistent, cooperative):
  - a CTA computes 128 x 256 output tiles (cluster of 2 along M: the w tile travels once by TMA multicast to both);
    one producer warp loads x and w K tiles by TMA into a ring of shared-memory stages (mbarrier pipeline), two
    consumer warpgroups each multiply their 64 rows by wgmma out of shared memory into fp32 registers;
  - the grid is one CTA an SM (the static persistent scheduler walks the tiles in swizzled groups for L2 reuse):
    the producer fetches the next tile's K tiles while the consumers store this one's output (registers ->
    shared memory by stmatrix -> global by TMA);
  - fp8, precise: Hopper's fp8 MMAs accumulate in reduced precision, so each K tile (128 deep) is multiplied into a
    zeroed partial sum and added into the fp32 accumulator (a promotion every 128 products, torch._scaled_mm's
    default). 64 x 256 fp32 accumulators take 128 registers a thread; a second full-width partial would not fit
    in the 232 a consumer gets, so each K tile runs as two 128-wide halves (64 registers of partial), each waited
    for and added; while one warpgroup adds, the other's MMAs keep the tensor cores busy. The scales multiply the
    accumulator once, in the epilogue.

The DSL is optional (tools/stage_cutlass.py stages it for the GPU machine); without it this module still imports:
the launcher's checks and the tile arithmetic work on any machine, and launching says what is missing.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

try:
    import cuda.bindings.driver as cuda_driver
    import cutlass
    import cutlass.cute as cute
    import cutlass.pipeline as pipeline
    import cutlass.utils as cutlass_utils
    import cutlass.utils.hopper_helpers as sm90
    from cutlass.cute.runtime import make_ptr
    from cutlass.memory import SmemAllocator
    from cutlass.tensor_utils import LayoutEnum
except ImportError as exc:  # the DSL is not installed: the checks still run, launching raises DSL_MISSING
    DSL_MISSING: str | None = (f"CUTLASS's Python DSL (nvidia-cutlass-dsl) is not importable here ({exc}); on the GPU machine "
                               "stage it with tools/stage_cutlass.py (lab/device/cutlass_check.sh does)")

    class _NoDSL:
        """Stands in for cutlass.cute's decorators, so the kernel class below is defined (never run) without it."""

        @staticmethod
        def jit(fn: Any) -> Any:
            return fn

        kernel = jit

    cute = _NoDSL()  # type: ignore[assignment]
else:
    DSL_MISSING = None

SMEM_BYTES = 232448  # sm_90's shared memory a CTA can opt into (227 KiB)
K_TILE_BYTES = 128  # one 128-byte swizzle row of K per stage: 64 bf16 or 128 fp8 elements
CONSUMER_REGISTERS, PRODUCER_REGISTERS = 232, 40  # setmaxnreg: 2 x 128 x 232 + 128 x 40 <= 65536
BARRIER_BYTES = 1024  # the pipeline's mbarriers, with room to spare


@dataclass(frozen=True)
class GemmConfig:
    """One CTA's output tile, its cluster and the tile order. tile_m is 64 rows per consumer warpgroup."""

    tile_m: int = 128
    tile_n: int = 256
    cluster_m: int = 2  # CTAs of a cluster along M share w's tile (multicast)
    cluster_n: int = 1  # ... along N share x's tile
    swizzle: int = 8  # clusters along N walked before moving down M: L2 reuse of x's rows and w's columns
    epilogue_n: int = 32  # output columns a subtile of the epilogue stores
    epilogue_stages: int = 4  # subtile buffers in shared memory: stores in flight before one waits for an old one

    def __post_init__(self) -> None:
        if self.tile_m not in (64, 128, 192, 256):
            raise ValueError(f"tile_m must be 64 rows per consumer warpgroup (64, 128, 192 or 256), got {self.tile_m}")
        if self.tile_n not in (64, 128, 256):
            raise ValueError(f"tile_n must be 64, 128 or 256 (a wgmma is at most 256 wide), got {self.tile_n}")
        for name in ("cluster_m", "cluster_n"):
            size = getattr(self, name)
            if size not in (1, 2, 4):
                raise ValueError(f"{name} must be 1, 2 or 4, got {size}")
        if self.cluster_m * self.cluster_n > 4:
            raise ValueError(f"a cluster of {self.cluster_m} x {self.cluster_n} CTAs is over the 4 this kernel allows")
        if self.swizzle < 1:
            raise ValueError(f"swizzle must be a positive number of clusters, got {self.swizzle}")
        if self.tile_n % self.epilogue_n:
            raise ValueError(f"epilogue_n ({self.epilogue_n}) must divide tile_n ({self.tile_n})")
        if not 2 <= self.epilogue_stages <= self.tile_n // self.epilogue_n:
            raise ValueError(f"epilogue_stages must be 2 to tile_n / epilogue_n ({self.tile_n // self.epilogue_n}), got {self.epilogue_stages}")


DEFAULT_CONFIG = GemmConfig()


@dataclass(frozen=True)
class Problem:
    """A checked call: sizes, the kernel it needs ('16bit' or 'fp8_precise') and the output dtype."""

    M: int
    N: int
    K: int
    kind: str
    in_dtype: torch.dtype
    out_dtype: torch.dtype


def k_tile(in_dtype: torch.dtype) -> int:
    """K elements a pipeline stage holds: one 128-byte swizzled row."""
    return K_TILE_BYTES // _itemsize(in_dtype)


def mma_width(config: GemmConfig, kind: str) -> int:
    """Columns one wgmma covers: the whole tile for 16-bit operands; fp8 precise multiplies 128-wide parts so that
    the partial sum it promotes fits beside the accumulator."""
    return min(config.tile_n, 128) if kind == "fp8_precise" else config.tile_n


def stages(config: GemmConfig, in_dtype: torch.dtype, out_dtype: torch.dtype) -> int:
    """Shared-memory stages of the x/w ring: what is left after the epilogue's buffers and the barriers."""
    per_stage = (config.tile_m + config.tile_n) * k_tile(in_dtype) * _itemsize(in_dtype)
    epilogue = config.tile_m * config.epilogue_n * _itemsize(out_dtype) * config.epilogue_stages
    return (SMEM_BYTES - epilogue - BARRIER_BYTES) // per_stage


def accumulator_registers(config: GemmConfig, kind: str) -> int:
    """fp32 registers a consumer thread holds for its 64-row slice: the accumulator, plus fp8's partial sum."""
    accumulator = 64 * config.tile_n // 128
    return accumulator + (64 * mma_width(config, kind) // 128 if kind == "fp8_precise" else 0)


def tile_count(M: int, N: int, config: GemmConfig = DEFAULT_CONFIG) -> int:
    return math.ceil(M / config.tile_m) * math.ceil(N / config.tile_n)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


_SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def plan(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None, scale_x: torch.Tensor | None = None,
         scale_w: torch.Tensor | None = None) -> Problem:
    """Check a call's operands (everything but the device) and say which kernel computes it; ValueError names what is
    wrong. 16-bit: x and w of one dtype, y in it. fp8: x and w e4m3fn with fp32 scalar scales, y bf16."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"expected x (M, K) and w (N, K); got {tuple(x.shape)} and {tuple(w.shape)}")
    M, K = x.shape
    N = w.shape[0]
    if min(M, N, K) == 0:
        raise ValueError(f"empty problem: M, N, K = {M}, {N}, {K}")
    if x.dtype != w.dtype:
        raise ValueError(f"x and w must share a dtype; got {x.dtype} and {w.dtype}")
    if x.device != w.device:
        raise ValueError(f"x and w must be on one device; got {x.device} and {w.device}")
    if x.dtype in _SIXTEEN_BIT:
        if scale_x is not None or scale_w is not None:
            raise ValueError(f"scales are for fp8 operands; x and w are {x.dtype}")
        kind, out_dtype = "16bit", x.dtype
    elif x.dtype == torch.float8_e4m3fn:
        if scale_x is None or scale_w is None:
            raise ValueError("fp8 operands need both scale_x and scale_w (fp32 scalars, as torch._scaled_mm takes them)")
        for name, s in (("scale_x", scale_x), ("scale_w", scale_w)):
            if s.numel() != 1 or s.dtype != torch.float32 or s.device != x.device:
                raise ValueError(f"{name} must be one fp32 value on {x.device}; got {tuple(s.shape)} {s.dtype} on {s.device}")
        kind, out_dtype = "fp8_precise", torch.bfloat16
    else:
        raise ValueError(f"x and w must be bfloat16, float16 or float8_e4m3fn; got {x.dtype}")
    for name, t in (("x", x), ("w", w)):
        if t.stride() != (t.shape[1], 1):
            raise ValueError(f"{name} must be row-major and contiguous (K innermost); its strides are {t.stride()}")
        if t.data_ptr() % 16:
            raise ValueError(f"{name}'s data must start on a 16-byte boundary for TMA")
    if (K * x.element_size()) % 16:
        raise ValueError(f"TMA needs 16-byte rows: K * itemsize = {K * x.element_size()} bytes is no multiple of 16")
    if (N * _itemsize(out_dtype)) % 16:
        raise ValueError(f"TMA needs 16-byte rows: N * {out_dtype} itemsize is no multiple of 16 (N = {N})")
    if out is not None:
        if out.shape != (M, N) or out.dtype != out_dtype or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous ({M}, {N}) {out_dtype} tensor; got {tuple(out.shape)} {out.dtype}")
        if out.device != x.device or out.data_ptr() % 16:
            raise ValueError(f"out must be on {x.device} and start on a 16-byte boundary")
    return Problem(M, N, K, kind, x.dtype, out_dtype)


def hopper_reason(device: torch.device) -> str | None:
    """Why the kernels cannot run on `device`, or None: they are written for sm_90 (wgmma, TMA multicast, setmaxnreg)."""
    if device.type != "cuda":
        return f"the CUTLASS kernels run on a Hopper GPU; the operands are on {device}"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        return f"the CUTLASS kernels are written for Hopper (sm_90); this GPU is sm_{major}{minor}"
    return None


# --------------------------------------------------------------------------------------------------------------------
# The kernel (CuTe DSL). Traced and compiled by cute.compile; the methods below run at trace time, their bodies are
# device code where marked @cute.kernel.
# --------------------------------------------------------------------------------------------------------------------


class HopperGemm:
    """The warp-specialized persistent GEMM for one (M, N, K), operand dtype and config; compile with compile_gemm."""

    def __init__(self, problem: Problem, config: GemmConfig = DEFAULT_CONFIG) -> None:
        self.problem = problem
        self.config = config
        self.precise = problem.kind == "fp8_precise"
        self.consumers = config.tile_m // 64  # consumer warpgroups, 64 rows each
        self.threads = 128 * (1 + self.consumers)
        self.tile_mnk = (config.tile_m, config.tile_n, k_tile(problem.in_dtype))
        self.mma_n = mma_width(config, problem.kind)
        self.parts = config.tile_n // self.mma_n  # fp8: the 128-wide parts each K tile is multiplied and promoted in
        self.stages = stages(config, problem.in_dtype, problem.out_dtype)
        self.cluster_mn = (config.cluster_m, config.cluster_n)
        # Cluster tiles: a cluster of cluster_m x cluster_n CTAs computes that many adjacent output tiles (rounded up:
        # a CTA past the edge loads zeros and its TMA stores are clipped).
        self.clusters_m = math.ceil(math.ceil(problem.M / config.tile_m) / config.cluster_m)
        self.clusters_n = math.ceil(math.ceil(problem.N / config.tile_n) / config.cluster_n)
        if self.stages < 2:
            raise ValueError(f"{config} leaves {self.stages} shared-memory stage(s) for {problem.in_dtype}: at least 2 are needed")

    def make_tiled_mma(self, ab_dtype: Any) -> Any:
        """The consumers' wgmma: one 64-row slice a warpgroup, mma_n columns an instruction, fp32 accumulators,
        x and w K-major from shared memory. Called while tracing (the kernel, and tests of its layouts)."""
        k_major = cute.nvgpu.OperandMajorMode.K
        return sm90.make_trivial_tiled_mma(ab_dtype, ab_dtype, k_major, k_major, cutlass.Float32, (self.consumers, 1, 1),
                                           tiler_mn=(64, self.mma_n))

    def make_epilogue_copy(self, tiled_mma: Any) -> Any:
        """Registers to shared memory for the epilogue: stmatrix, laid out over the wgmma's accumulator fragment."""
        y_layout = LayoutEnum.ROW_MAJOR
        r2s_atom = sm90.get_smem_store_op(y_layout, cutlass.BFloat16 if self.problem.out_dtype == torch.bfloat16 else cutlass.Float16,
                                          cutlass.Float32)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(y_layout.is_m_major_c(), 4), r2s_atom.value_type)
        return cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, w_ptr: cute.Pointer, y_ptr: cute.Pointer, scale_x_ptr: cute.Pointer,
                 scale_w_ptr: cute.Pointer, max_active_clusters: cutlass.Constexpr, stream: cuda_driver.CUstream) -> None:
        M, N, K = self.problem.M, self.problem.N, self.problem.K
        # (rows, K, batch of 1): static layouts, so the kernel is specialized to the shape (and compiled per shape).
        mX = cute.make_tensor(x_ptr, cute.make_layout((M, K, 1), stride=(K, 1, M * K)))
        mW = cute.make_tensor(w_ptr, cute.make_layout((N, K, 1), stride=(K, 1, N * K)))
        mY = cute.make_tensor(y_ptr, cute.make_layout((M, N, 1), stride=(N, 1, M * N)))
        mScaleX = cute.make_tensor(scale_x_ptr, cute.make_layout(1))
        mScaleW = cute.make_tensor(scale_w_ptr, cute.make_layout(1))
        ab_dtype = self.ab_dtype = mX.element_type
        self.y_dtype = mY.element_type
        x_layout = LayoutEnum.from_tensor(mX)
        w_layout = LayoutEnum.from_tensor(mW)
        y_layout = self.y_layout = LayoutEnum.from_tensor(mY)

        tiled_mma = self.make_tiled_mma(ab_dtype)
        x_smem = sm90.make_smem_layout_a(x_layout, self.tile_mnk, ab_dtype, self.stages)
        w_smem = sm90.make_smem_layout_b(w_layout, self.tile_mnk, ab_dtype, self.stages)
        epi_tile = (self.config.tile_m, self.config.epilogue_n)
        y_smem = sm90.make_smem_layout_epi(mY.element_type, y_layout, epi_tile, self.config.epilogue_stages)

        cpasync = cute.nvgpu.cpasync
        cm, cn = self.cluster_mn
        # x's tile is the same for the CTAs of a cluster row (along N), w's for a cluster column (along M).
        tma_x, gX = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SMulticastOp() if cn > 1 else cpasync.CopyBulkTensorTileG2SOp(),
            mX, cute.slice_(x_smem, (None, None, 0)), (self.tile_mnk[0], self.tile_mnk[2]), num_multicast=cn)
        tma_w, gW = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SMulticastOp() if cm > 1 else cpasync.CopyBulkTensorTileG2SOp(),
            mW, cute.slice_(w_smem, (None, None, 0)), (self.tile_mnk[1], self.tile_mnk[2]), num_multicast=cm)
        tma_y, gY = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mY, cute.slice_(y_smem, (None, None, 0)), epi_tile)

        # One cluster of CTAs per (z) grid slot, as many as run at once: each walks the cluster tiles tile_of orders.
        grid = (cm, cn, min(self.clusters_m * self.clusters_n, max_active_clusters))
        self.kernel(tma_x, gX, tma_w, gW, tma_y, gY, mScaleX, mScaleW, tiled_mma, cute.make_layout((cm, cn, 1)),
                    x_smem, w_smem, y_smem).launch(
            grid=grid, block=[self.threads, 1, 1], cluster=(cm, cn, 1), min_blocks_per_mp=1, stream=stream)

    @cute.jit
    def tile_of(self, linear: cutlass.Int32, cluster_coord: Any) -> tuple[cutlass.Int32, cutlass.Int32]:
        """The (row, column) output tile of this CTA in cluster tile number `linear`. Cluster tiles go in groups of
        `swizzle` cluster columns: down the rows within a group, across the group's columns fastest, so the CTAs at
        work at once share x's rows and w's columns in L2 (the last group may be narrower)."""
        swizzle = self.config.swizzle
        group = linear // (swizzle * self.clusters_m)
        within = linear - group * (swizzle * self.clusters_m)
        width = cutlass.min(swizzle, self.clusters_n - group * swizzle)
        row = within // width
        col = group * swizzle + (within - row * width)
        return row * self.cluster_mn[0] + cluster_coord[0], col * self.cluster_mn[1] + cluster_coord[1]

    @cute.kernel
    def kernel(self, tma_x: cute.CopyAtom, mX: cute.Tensor, tma_w: cute.CopyAtom, mW: cute.Tensor, tma_y: cute.CopyAtom,
               mY: cute.Tensor, mScaleX: cute.Tensor, mScaleW: cute.Tensor, tiled_mma: cute.TiledMma,
               cluster_layout: cute.Layout, x_smem: cute.ComposedLayout, w_smem: cute.ComposedLayout,
               y_smem: cute.ComposedLayout) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        role = cute.arch.make_warp_uniform(tidx // 128)  # warpgroup 0 loads, 1.. multiply
        cm, cn = self.cluster_mn
        if warp == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_x)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_w)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_y)

        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cluster_layout.get_flat_coord(rank)
        x_mask = cute.make_layout_image_mask(cluster_layout, cluster_coord, mode=1) if cn > 1 else 0
        w_mask = cute.make_layout_image_mask(cluster_layout, cluster_coord, mode=0) if cm > 1 else 0

        # Shared memory: the ring's full/empty barriers, the x and w stages, the output subtiles.
        smem = SmemAllocator()
        barriers = smem.allocate_array(cutlass.Int64, 2 * self.stages)
        sX = smem.allocate_tensor(self.ab_dtype, x_smem.outer, 1024, x_smem.inner)
        sW = smem.allocate_tensor(self.ab_dtype, w_smem.outer, 1024, w_smem.inner)
        sY = smem.allocate_tensor(self.y_dtype, y_smem.outer, 1024, y_smem.inner)
        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(x_smem, (None, None, 0))) + cute.size_in_bytes(
            self.ab_dtype, cute.slice_(w_smem, (None, None, 0)))
        # A stage is free once every consumer warp of every CTA its loads land in has released it.
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers, num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, (cm + cn - 1) * self.consumers * 4),
            tx_count=stage_bytes, cta_layout_vmnk=cute.make_layout((1, cm, cn, 1)), defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        # Global tiles: (rows, K tile, row tiles, K tiles, 1) and the output's (rows, cols, row tiles, col tiles, 1).
        gX_tiles = cute.local_tile(mX, cute.slice_(self.tile_mnk, (None, 0, None)), (None, None, None))
        gW_tiles = cute.local_tile(mW, cute.slice_(self.tile_mnk, (0, None, None)), (None, None, None))
        gY_tiles = cute.local_tile(mY, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None))
        tXsX, tXgX = cute.nvgpu.cpasync.tma_partition(tma_x, cluster_coord[1], cute.make_layout(cute.slice_(cluster_layout, (0, None, 0)).shape),
                                           cute.group_modes(sX, 0, 2),
                                           cute.group_modes(gX_tiles, 0, 2))
        tWsW, tWgW = cute.nvgpu.cpasync.tma_partition(tma_w, cluster_coord[0], cute.make_layout(cute.slice_(cluster_layout, (None, 0, 0)).shape),
                                           cute.group_modes(sW, 0, 2),
                                           cute.group_modes(gW_tiles, 0, 2))
        k_tiles = cute.size(gX_tiles, mode=[3])
        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if role == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
            if warp == 0:
                fill = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                for linear in range(cute.arch.block_idx()[2], self.clusters_m * self.clusters_n, cute.arch.grid_dim()[2]):
                    tile_m, tile_n = self.tile_of(linear, cluster_coord)
                    tXgX_tile = tXgX[(None, tile_m, None, 0)]
                    tWgW_tile = tWgW[(None, tile_n, None, 0)]
                    for k in range(k_tiles):
                        ring.producer_acquire(fill)
                        full = ring.producer_get_barrier(fill)
                        cute.copy(tma_x, tXgX_tile[(None, k)], tXsX[(None, fill.index)], tma_bar_ptr=full, mcast_mask=x_mask)
                        cute.copy(tma_w, tWgW_tile[(None, k)], tWsW[(None, fill.index)], tma_bar_ptr=full, mcast_mask=w_mask)
                        ring.producer_commit(fill)
                        fill.advance()
                ring.producer_tail(fill)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self.consume(ring, tiled_mma, tma_y, gY_tiles, sX, sW, sY, mScaleX, mScaleW, cluster_coord, k_tiles, tidx, warp)

    @cute.jit
    def consume(self, ring: Any, tiled_mma: cute.TiledMma, tma_y: cute.CopyAtom, gY_tiles: cute.Tensor, sX: cute.Tensor,
                sW: cute.Tensor, sY: cute.Tensor, mScaleX: cute.Tensor, mScaleW: cute.Tensor, cluster_coord: Any,
                k_tiles: cutlass.Int32, tidx: cutlass.Int32, warp: cutlass.Int32) -> None:
        """The consumer warpgroups: for each output tile, the K loop (wgmma from the ring), then the epilogue."""
        consumer_threads = 128 * self.consumers
        ctid = tidx - 128  # thread index among the consumers
        # The MMA partitions a warpgroup by its first thread.
        thr_mma = tiled_mma.get_slice(cute.make_layout(self.consumers, stride=128)((tidx - 128) // 128))
        tCrX = tiled_mma.make_fragment_A(thr_mma.partition_A(sX))  # (MMA, MMA_M, MMA_K, STAGE) descriptors
        tCrW = tiled_mma.make_fragment_B(thr_mma.partition_B(sW))  # (MMA, MMA_N, MMA_K, STAGE)
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gY_tiles).shape[:3], cutlass.Float32)  # (MMA, MMA_M, MMA_N)
        if cutlass.const_expr(self.precise):
            # w's stage split into its mma_n-row parts, each partitioned on its own: (MMA, 1, MMA_K, STAGE) per part.
            sW_parts = cute.flat_divide(sW, (self.mma_n,))  # (mma_n, parts, K tile, STAGE)
            tCrW_parts = [tiled_mma.make_fragment_B(thr_mma.partition_B(sW_parts[(None, p, None, None)]))
                          for p in range(self.parts)]
            part = cute.make_rmem_tensor(tiled_mma.partition_shape_C((self.config.tile_m, self.mma_n)), cutlass.Float32)
        k_blocks = cute.size(tCrX, mode=[2])

        # Epilogue: accumulator -> registers of the output dtype -> shared memory (stmatrix) -> global (TMA store).
        r2s = self.make_epilogue_copy(tiled_mma)
        thr_r2s = r2s.get_slice(ctid)
        tRS_sY = thr_r2s.partition_D(sY)  # (R2S, R2S_M, R2S_N, epilogue_stages)
        tRS_acc = r2s.retile(acc)
        sub_shape = cute.shape(thr_r2s.partition_S(sY))[:3]
        sub_acc = cute.make_rmem_tensor(sub_shape, cutlass.Float32)
        sub_out = cute.make_rmem_tensor(sub_shape, self.y_dtype)
        sub_size = cute.size(sub_acc)
        subtiles = self.config.tile_n // self.config.epilogue_n
        epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=consumer_threads)
        stores = pipeline.PipelineTmaStore.create(
            num_stages=self.config.epilogue_stages, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_threads))
        if cutlass.const_expr(self.precise):
            scale = mScaleX[0] * mScaleW[0]

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        first, step = cute.arch.block_idx()[2], cute.arch.grid_dim()[2]
        for linear in range(first, self.clusters_m * self.clusters_n, step):
            tile_m, tile_n = self.tile_of(linear, cluster_coord)
            if cutlass.const_expr(self.precise):
                # Each K tile: per 128-wide part, MMAs into a zeroed partial, waited for, added into fp32.
                acc.fill(0.0)
                for _k in range(k_tiles):
                    ring.consumer_wait(read)
                    for p in cutlass.range_constexpr(self.parts):
                        cute.nvgpu.warpgroup.fence()  # the adds below read the partial's registers that these MMAs rewrite
                        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
                        for kb in cutlass.range_constexpr(k_blocks):
                            cute.gemm(tiled_mma, part, tCrX[(None, None, kb, read.index)], tCrW_parts[p][(None, None, kb, read.index)], part)
                            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                        cute.nvgpu.warpgroup.commit_group()
                        cute.nvgpu.warpgroup.wait_group(0)
                        acc_p = acc[(None, 0, p)]
                        acc_p.store(acc_p.load() + part[(None, 0, 0)].load())
                    ring.consumer_release(read)
                    read.advance()
            else:
                # 16-bit: the MMAs accumulate in fp32 over all of K; one K tile's MMAs in flight while the next are
                # issued, its stage released once they are done.
                acc.fill(0.0)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                cute.nvgpu.warpgroup.fence()
                ring.consumer_wait(read)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrX[(None, None, kb, read.index)], tCrW[(None, None, kb, read.index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                read.advance()
                for _k in range(1, k_tiles):
                    ring.consumer_wait(read)
                    for kb in cutlass.range_constexpr(k_blocks):
                        cute.gemm(tiled_mma, acc, tCrX[(None, None, kb, read.index)], tCrW[(None, None, kb, read.index)], acc)
                    cute.nvgpu.warpgroup.commit_group()
                    cute.nvgpu.warpgroup.wait_group(1)
                    ring.consumer_release(release)
                    release.advance()
                    read.advance()
                cute.nvgpu.warpgroup.wait_group(0)
                ring.consumer_release(release)
                release.advance()

            # Epilogue, one tile_m x epilogue_n subtile at a time through epilogue_stages shared-memory buffers.
            gY_tile = gY_tiles[(None, None, tile_m, tile_n, 0)]
            gY_sub = cute.zipped_divide(gY_tile, (self.config.tile_m, self.config.epilogue_n))
            bSG_sY, bSG_gY = cute.nvgpu.cpasync.tma_partition(tma_y, 0, cute.make_layout(1), cute.group_modes(sY, 0, 2), gY_sub)
            done_before = (linear - first) // step * subtiles  # subtiles this CTA stored before this tile
            for s in cutlass.range_constexpr(subtiles):
                for v in cutlass.range_constexpr(sub_size):
                    sub_acc[v] = tRS_acc[s * sub_size + v]
                values = sub_acc.load()
                if cutlass.const_expr(self.precise):
                    values = values * scale
                sub_out.store(values.to(self.y_dtype))
                buffer = (done_before + s) % self.config.epilogue_stages
                cute.copy(r2s, sub_out, tRS_sY[(None, None, None, buffer)])
                # stmatrix writes are generic-proxy stores that the TMA engine (async proxy) reads next.
                cute.arch.fence_proxy("async.shared", space="cta")
                epi_barrier.arrive_and_wait()
                if warp == 4:
                    cute.copy(tma_y, bSG_sY[(None, buffer)], bSG_gY[(None, (0, s))])
                    stores.producer_commit()
                    stores.producer_acquire()  # the next subtile's buffer is free once its old store has read it
                epi_barrier.arrive_and_wait()
        stores.producer_tail()


# --------------------------------------------------------------------------------------------------------------------
# Host side: compile once per (shape, dtype, config, device), launch on the current stream.
# --------------------------------------------------------------------------------------------------------------------

_compiled: dict[tuple[Any, ...], Any] = {}
_compile_lock = threading.Lock()
_ones: dict[torch.device, torch.Tensor] = {}  # the 16-bit kernel's unused scale pointers


def _dsl_dtype(dtype: torch.dtype) -> Any:
    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float8_e4m3fn: cutlass.Float8E4M3FN,
            torch.float32: cutlass.Float32}[dtype]


def _pointer(dtype: torch.dtype, address: int) -> Any:
    return make_ptr(_dsl_dtype(dtype), address, cute.AddressSpace.gmem, assumed_align=16)


def compile_gemm(problem: Problem, config: GemmConfig = DEFAULT_CONFIG, max_active_clusters: int | None = None,
                 options: str = "") -> Any:
    """cute.compile the kernel for one problem, for sm_90a. max_active_clusters: how many clusters run at once (the
    persistent grid); by default asked of the current GPU (a GPU-less compile must pass it). No device memory is
    touched: the pointers are placeholders; the compiled function takes the real ones. It keeps its PTX and cubin in
    memory (`artifacts`), where the gate reads the kernel's codegen facts (speedgate.codegen.cute_facts); the copies
    the DSL writes beside them go to a folder removed after the compile."""
    import tempfile

    if DSL_MISSING:
        raise RuntimeError(DSL_MISSING)
    if max_active_clusters is None:
        max_active_clusters = cutlass_utils.HardwareInfo().get_max_active_clusters(config.cluster_m * config.cluster_n)
    placeholders = [_pointer(problem.in_dtype, 0), _pointer(problem.in_dtype, 0), _pointer(problem.out_dtype, 0),
                    _pointer(torch.float32, 0), _pointer(torch.float32, 0)]
    with tempfile.TemporaryDirectory(prefix="cutlass-dump-") as dump:
        return cute.compile(HopperGemm(problem, config), *placeholders, max_active_clusters, cuda_driver.CUstream(0),
                            options=f"--gpu-arch sm_90a --keep-ptx --keep-cubin --dump-dir {dump} {options}".strip())


def compiled_for(problem: Problem, device: torch.device, config: GemmConfig = DEFAULT_CONFIG) -> Any:
    """The compiled kernel for this problem on this device, compiled at the first call (seconds) and cached."""
    key = (problem, config, device.index if device.index is not None else torch.cuda.current_device())
    found = _compiled.get(key)
    if found is None:
        with _compile_lock:
            found = _compiled.get(key)
            if found is None:
                with torch.cuda.device(device):
                    found = _compiled[key] = compile_gemm(problem, config)
    return found


def matmul(x: torch.Tensor, w: torch.Tensor, *, scale_x: torch.Tensor | None = None, scale_w: torch.Tensor | None = None,
           out: torch.Tensor | None = None, config: GemmConfig = DEFAULT_CONFIG) -> torch.Tensor:
    """y = x @ w.T on Hopper through the CUTLASS kernel: bf16/fp16 operands give their dtype; e4m3 operands with fp32
    scalar scales give bf16 (x @ w.T) * scale_x * scale_w accumulated precisely, as torch._scaled_mm does by default.
    Raises ValueError on operands the kernel cannot take, RuntimeError off Hopper or without the DSL."""
    problem = plan(x, w, out, scale_x, scale_w)
    if reason := hopper_reason(x.device):
        raise RuntimeError(reason)
    if DSL_MISSING:
        raise RuntimeError(DSL_MISSING)
    kernel = compiled_for(problem, x.device, config)
    y = out if out is not None else torch.empty((problem.M, problem.N), device=x.device, dtype=problem.out_dtype)
    if scale_x is None or scale_w is None:
        scale_x = scale_w = _ones.setdefault(x.device, torch.ones((), device=x.device, dtype=torch.float32))
    stream = cuda_driver.CUstream(torch.cuda.current_stream(x.device).cuda_stream)
    kernel(_pointer(problem.in_dtype, x.data_ptr()), _pointer(problem.in_dtype, w.data_ptr()),
           _pointer(problem.out_dtype, y.data_ptr()), _pointer(torch.float32, scale_x.data_ptr()),
           _pointer(torch.float32, scale_w.data_ptr()), stream)
    return y


def compile_report(problem: Problem, config: GemmConfig = DEFAULT_CONFIG, max_active_clusters: int = 66) -> dict[str, Any]:
    """What ptxas made of the kernel for sm_90a, on any machine (no GPU: the DSL compiles without one): the kernel's
    registers at entry (the launch bound; setmaxnreg then moves them between the roles), local memory and stack
    (spills), static and dynamic shared memory, and the count of each SASS opcode, read with the cuobjdump and
    nvdisasm that Triton ships (the resource usage as the gate reads it: speedgate.codegen.cubin_usage)."""
    import collections
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    import triton.backends.nvidia as nvidia_backend

    from speedgate import codegen

    tools = Path(nvidia_backend.__file__).parent / "bin"
    compiled = compile_gemm(problem, config, max_active_clusters)
    usage = codegen.cubin_usage(compiled.artifacts.CUBIN)
    if len(usage) != 1:
        raise RuntimeError(f"cuobjdump's resource usage of the kernel's cubin names {len(usage)} functions, not 1")
    [counts] = usage.values()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.artifacts.CUBIN)
        sass = subprocess.run([str(tools / "nvdisasm"), str(cubin)], capture_output=True, text=True, check=True).stdout
    resources = {key.lower(): counts[key] for key in ("REG", "STACK", "SHARED", "LOCAL")}
    opcodes = collections.Counter(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)", sass, re.M))
    per_stage = (config.tile_m + config.tile_n) * k_tile(problem.in_dtype) * _itemsize(problem.in_dtype)
    epilogue = config.tile_m * config.epilogue_n * _itemsize(problem.out_dtype) * config.epilogue_stages
    ring = stages(config, problem.in_dtype, problem.out_dtype)
    # The allocator's order: the ring's barriers (padded to the 1024-byte alignment of what follows), x, w, y.
    return {**resources, "stages": ring, "dynamic_smem": BARRIER_BYTES + per_stage * ring + epilogue, "opcodes": dict(opcodes)}


def layout_check(problem: Problem, config: GemmConfig = DEFAULT_CONFIG, threads: tuple[int, ...] | None = None) -> dict[str, int]:
    """The two register layouts the kernel's code relies on, checked at trace time for the given consumer threads
    (default: all of them; about a minute), on any machine: (1) fp8's partial sum of part p holds the accumulator's elements of columns [p * mma_n, (p + 1) * mma_n)
    in the same order (the promotion adds part[j] into acc[(None, 0, p)][j]); (2) element s * size + v of the
    epilogue's retiled accumulator lies where subtile s's copy writes its element v (columns s * epilogue_n on).
    Returns the number of elements where each does not hold: both 0 for a kernel that stores what it computed."""
    if DSL_MISSING:
        raise RuntimeError(DSL_MISSING)
    found: dict[str, int] = {}
    import warnings

    gemm = HopperGemm(problem, config)
    with warnings.catch_warnings():  # the probe's trace-time loops are long on purpose: no code comes of them
        warnings.filterwarnings("ignore", message="This static loop has")
        cute.compile(_layout_probe, gemm, tuple(range(128 * gemm.consumers)) if threads is None else threads, found,
                     options="--gpu-arch sm_90a")
    return found


@cute.jit
def _layout_probe(gemm: cutlass.Constexpr, threads: cutlass.Constexpr, found: cutlass.Constexpr) -> None:
    tiled_mma = gemm.make_tiled_mma(_dsl_dtype(gemm.problem.in_dtype))
    r2s = gemm.make_epilogue_copy(tiled_mma)
    tile_m, tile_n, sub_n = gemm.config.tile_m, gemm.config.tile_n, gemm.config.epilogue_n
    part_errors, epilogue_errors = 0, 0
    for tid in threads:  # a Python loop: traced once per thread
        thr = tiled_mma.get_slice(tid)
        full = thr.partition_C(cute.make_identity_tensor((tile_m, tile_n)))  # the coordinate of each accumulator
        part = thr.partition_C(cute.make_identity_tensor((tile_m, gemm.mma_n)))[(None, 0, 0)]
        for p in cutlass.range_constexpr(gemm.parts):
            view = full[(None, 0, p)]
            for j in cutlass.range_constexpr(cute.size(part)):
                if cutlass.const_expr(view[j][0] != part[j][0] or view[j][1] != part[j][1] + p * gemm.mma_n):
                    part_errors += 1
        acc = cute.make_rmem_tensor(full.shape, cutlass.Float32)
        logical = {}  # storage offset -> logical index of the accumulator fragment
        for j in cutlass.range_constexpr(cute.size(acc)):
            logical[acc.layout(j)] = j
        retiled = r2s.retile(acc)
        sub = r2s.get_slice(tid).partition_S(cute.make_identity_tensor((tile_m, sub_n)))
        for i in cutlass.range_constexpr(cute.size(retiled)):
            where = full[logical[retiled.layout(i)]]
            want = sub[i % cute.size(sub)]
            if cutlass.const_expr(where[0] != want[0] or where[1] != want[1] + sub_n * (i // cute.size(sub))):
                epilogue_errors += 1
    found.update(part=part_errors, epilogue=epilogue_errors)


def config_record(problem_kind: str, config: GemmConfig = DEFAULT_CONFIG, in_dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    """The kernel's shape as the suite records it beside a comparison."""
    return {"tile": [config.tile_m, config.tile_n, k_tile(in_dtype)], "cluster": [config.cluster_m, config.cluster_n],
            "stages": stages(config, in_dtype, torch.bfloat16 if problem_kind == "fp8_precise" else in_dtype),
            "mma_n": mma_width(config, problem_kind), "swizzle": config.swizzle,
            "form": "warp-specialized, persistent, cooperative" + (", promoted per 128-wide part" if problem_kind == "fp8_precise" else "")}
