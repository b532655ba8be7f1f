"""Matmul kernels: a tiled, autotuned kernel with fused epilogues, and a persistent kernel on TMA descriptors.

Layout throughout: y = x @ w.T with x (M, K) and w (N, K) row-major, as nn.Linear stores its weight; K is
contiguous in both operands, the layout Hopper's wgmma (and fp8 in particular) wants.
Work: 2*M*N*K flops; the fewest bytes are (M*K + N*K + M*N) * itemsize.

The persistent kernel's blocks are public for the lab's variants, which rebuild its loops around them
(lab/matmul_variants.py): tile_configs, prune, set_tma_block_shapes, EPILOGUE_KEYS, tile_offsets, k_tile, store_tile.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import INTERPRETING, best_config  # noqa: F401 (best_config re-exported for the tests)

ACTIVATIONS = (None, "gelu_tanh")


def tile_configs(pre_hook: Any = None) -> list[triton.Config]:
    """Tile shapes to autotune over on the GPU; one small config under the interpreter (which cannot autotune)."""
    if INTERPRETING:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=1, pre_hook=pre_hook)]
    shapes = [
        # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
        (128, 256, 64, 3, 8),
        (256, 128, 64, 3, 8),
        (128, 128, 64, 4, 8),
        (128, 128, 64, 3, 4),
        # 128-deep K tiles, kept for 8-bit operands only (see prune): fp8 promotes its accumulator once per
        # K tile, and 128x128 tiles leave registers for the second accumulator that promotion needs.
        (128, 256, 128, 3, 8),
        (256, 128, 128, 3, 8),
        (128, 128, 128, 4, 8),
        (128, 128, 128, 5, 8),
        (64, 256, 64, 4, 4),
        (128, 64, 64, 4, 4),
    ]
    if pre_hook is None:
        # The tiled kernel: 128x256x64 loses to 256x128x64 under the gate's conditions (L2 flushed per call) but
        # sometimes wins the autotuner's race, and the case then changes config between runs. Left out, so the case
        # measures the kernel, not the autotuner's coin (docs/results/timing.md).
        shapes = [shape for shape in shapes if shape != (128, 256, 64, 3, 8)]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=s, num_warps=w, pre_hook=pre_hook)
        for m, n, k, s, w in shapes
    ]


def prune(configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any) -> list[triton.Config]:
    """16-bit operands: 64-deep K tiles only (128-deep ones overflow shared memory on the wide tiles).
    8-bit operands: 128-deep K tiles only: every fp8 case chose one when all were raced (the H100's runs:
    docs/results/triton-suite.md), and the race is half as long without the rest."""
    if INTERPRETING:
        return configs
    x = named_args["x_ptr"] if "x_ptr" in named_args else named_args["x_desc"].base
    depth = 128 // x.element_size()
    kept = [c for c in configs if c.kwargs["BLOCK_K"] == depth]
    return kept or configs


@triton.jit
def _gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanh(u) = 2 sigmoid(2u) - 1
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (2.0 * tl.sigmoid(2.0 * inner))


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
              HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROW_SCALE: tl.constexpr):
    """Everything after the K loop, on the fp32 accumulator: scales, row scale, bias, activation."""
    if HAS_SCALE:
        acc = acc * (tl.load(scale_x_ptr) * tl.load(scale_w_ptr))
    if HAS_ROW_SCALE:
        acc = acc * tl.load(row_scale_ptr + offs_m, mask=offs_m < M, other=0.0)[:, None]
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == "gelu_tanh":
        acc = _gelu_tanh(acc)
    return acc


EPILOGUE_KEYS = ["HAS_BIAS", "ACTIVATION", "HAS_SCALE", "HAS_ROW_SCALE", "FP8_PRECISE"]


@triton.autotune(configs=tile_configs(), key=["M", "N", "K", *EPILOGUE_KEYS], prune_configs_by={"early_config_prune": prune})
@triton.jit
def _matmul_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROW_SCALE: tl.constexpr,
    FP8_PRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M row-tiles share each column-tile while it is hot in L2.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past the edge read row (m mod M): valid memory, never stored.
    x_ptrs = x_ptr + (offs_m[:, None] % M).to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + (offs_n[None, :] % N).to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if FP8_PRECISE:
            # Hopper's fp8 MMAs accumulate in reduced precision; promote to fp32 after every K tile, as
            # torch._scaled_mm does by default (its use_fast_accum=False).
            acc = tl.dot(x, w, acc, max_num_imprecise_acc=BLOCK_K)
        else:
            acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
                    HAS_BIAS, ACTIVATION, HAS_SCALE, HAS_ROW_SCALE)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _check_operands(x: torch.Tensor, w: torch.Tensor) -> tuple[int, int, int]:
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"expected x (M, K) and w (N, K); got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.dtype != w.dtype or x.device != w.device:
        raise ValueError(f"x and w must share dtype and device; got {x.dtype}/{x.device} and {w.dtype}/{w.device}")
    return x.shape[0], w.shape[0], x.shape[1]


def _epilogue_args(
    x: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
    scale_x: torch.Tensor | None, scale_w: torch.Tensor | None, row_scale: torch.Tensor | None,
    fp8_fast_accum: bool = False,
) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    """The epilogue's pointer arguments (out stands in for absent ones: never read) and its constexpr flags."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if (scale_x is None) != (scale_w is None):
        raise ValueError("pass both scale_x and scale_w, or neither")
    pointers = tuple(t if t is not None else out for t in (bias, scale_x, scale_w, row_scale))
    flags = dict(
        HAS_BIAS=bias is not None, ACTIVATION=activation, HAS_SCALE=scale_x is not None,
        HAS_ROW_SCALE=row_scale is not None,
        FP8_PRECISE=x.element_size() == 1 and x.device.type == "cuda" and not fp8_fast_accum,
    )
    return pointers, flags


def _output(x: torch.Tensor, M: int, N: int, out: torch.Tensor | None, out_dtype: torch.dtype | None) -> torch.Tensor:
    # 8-bit operands produce bf16, as torch._scaled_mm is asked to here; 16-bit ones their own dtype.
    out_dtype = out_dtype or (x.dtype if x.element_size() >= 2 else torch.bfloat16)
    if out is None:
        return torch.empty((M, N), device=x.device, dtype=out_dtype)
    if out.shape != (M, N) or out.dtype != out_dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous ({M}, {N}) {out_dtype} tensor")
    return out


def matmul(
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
) -> torch.Tensor:
    """y = act((x @ w.T) * scale_x * scale_w * row_scale[:, None] + bias), accumulated in fp32, rounded once.

    The tiled kernel: the teaching baseline (the Triton tutorial's form, loads by cp.async, one program a tile),
    gated against its own blessed speed, not held to cuBLAS; matmul_tma_persistent is the one that matches cuBLAS
    (README, "Matmul"), and for precise fp8 perftests/kernels/matmul_gluon.py.
    scale_x and scale_w are scalar fp32 tensors (per-tensor fp8 scaling); row_scale an fp32 (M,) vector.
    fp8_fast_accum=True leaves Hopper's fp8 MMAs in their reduced-precision accumulation for the whole K loop
    (torch._scaled_mm's use_fast_accum=True); by default the accumulator is promoted to fp32 every K tile.
    """
    M, N, K = _check_operands(x, w)
    out = _output(x, M, N, out, out_dtype)
    pointers, flags = _epilogue_args(x, out, bias, activation, scale_x, scale_w, row_scale, fp8_fast_accum)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    _matmul_kernel[grid](
        x, w, out, *pointers, M, N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1), **flags,
    )
    return out


def set_tma_block_shapes(nargs: dict[str, Any]) -> None:
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["x_desc"].block_shape = [bm, bk]
    nargs["w_desc"].block_shape = [bn, bk]
    nargs["y_desc"].block_shape = [bm, bn]


@triton.jit
def tile_offsets(tile_id, num_pid_m, num_pid_in_group, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  GROUP_M: tl.constexpr):
    """The first row and column of output tile tile_id in grouped order: GROUP_M row-tiles share each column-tile
    while it is hot in L2."""
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def k_tile(x_desc, w_desc, off_m, off_n, ki, BLOCK_K: tl.constexpr):
    """K tile ki of x's rows and w's columns of one output tile, by TMA: the copy engine fills shared memory; edges
    are zero-filled."""
    x = x_desc.load([off_m, ki * BLOCK_K])
    w = w_desc.load([off_n, ki * BLOCK_K])
    return x, w


@triton.jit
def store_tile(acc, y_desc, off_m, off_n, M, N, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
                HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROW_SCALE: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
                    HAS_BIAS, ACTIVATION, HAS_SCALE, HAS_ROW_SCALE)
    y_desc.store([off_m, off_n], acc.to(y_desc.dtype))


@triton.autotune(configs=tile_configs(set_tma_block_shapes), key=["M", "N", "K", *EPILOGUE_KEYS],
                 prune_configs_by={"early_config_prune": prune})
@triton.jit
def _matmul_tma_persistent_kernel(
    x_desc, w_desc, y_desc, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr, M, N, K,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROW_SCALE: tl.constexpr,
    FP8_PRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    # One program per SM walks the output tiles with a stride of NUM_SMS: no tail wave, no launch per tile.
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS):
        off_m, off_n = tile_offsets(tile_id, num_pid_m, num_pid_in_group, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            x, w = k_tile(x_desc, w_desc, off_m, off_n, ki, BLOCK_K)
            if FP8_PRECISE:
                acc = tl.dot(x, w.T, acc, max_num_imprecise_acc=BLOCK_K)
            else:
                acc = tl.dot(x, w.T, acc)
        store_tile(acc, y_desc, off_m, off_n, M, N, bias_ptr, scale_x_ptr, scale_w_ptr, row_scale_ptr,
                    HAS_BIAS, ACTIVATION, HAS_SCALE, HAS_ROW_SCALE, BLOCK_M, BLOCK_N)


def num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter: a few programs, so the persistent loop runs more than once


def tma_arguments(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
    scale_x: torch.Tensor | None, scale_w: torch.Tensor | None, row_scale: torch.Tensor | None,
    out_dtype: torch.dtype | None, out: torch.Tensor | None, fp8_fast_accum: bool,
) -> tuple[torch.Tensor, tuple[Any, ...], dict[str, Any]]:
    """The persistent kernel's output, its positional arguments (descriptors, epilogue pointers, M, N, K) and its
    epilogue flags, the operands checked."""
    M, N, K = _check_operands(x, w)
    y = _output(x, M, N, out, out_dtype)
    if (K * x.element_size()) % 16 or (N * y.element_size()) % 16:
        raise ValueError("TMA needs 16-byte aligned rows: K and N times the item size must be multiples of 16")
    pointers, flags = _epilogue_args(x, y, bias, activation, scale_x, scale_w, row_scale, fp8_fast_accum)
    # Block shapes are placeholders; the autotuner's pre_hook sets them per config.
    descs = tuple(TensorDescriptor.from_tensor(t, [32, 32]) for t in (x, w, y))
    return y, (*descs, *pointers, M, N, K), flags


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
) -> torch.Tensor:
    """matmul() with TMA descriptors and a persistent grid of one program per SM (Hopper). Its variants (other
    promotion intervals, warp specialization, programs an SM, one config without the race) are
    lab/matmul_variants.py's."""
    y, args, flags = tma_arguments(x, w, bias, activation, scale_x, scale_w, row_scale, out_dtype, out, fp8_fast_accum)
    M, N = y.shape
    sms = num_sms(x.device)  # persistent programs: the grid, and the stride of their tile loop
    grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    _matmul_tma_persistent_kernel[grid](*args, **flags, NUM_SMS=sms)
    return y


KERNELS = {"tiled": (matmul, "_matmul_kernel"), "tma_persistent": (matmul_tma_persistent, "_matmul_tma_persistent_kernel")}


def launcher(kernel: str) -> tuple[Any, Any]:
    """(launch function, its autotuned kernel) for 'tiled' or 'tma_persistent'."""
    fn, name = KERNELS[kernel]
    return fn, globals()[name]


def matmul_flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def matmul_bytes(M: int, N: int, K: int, in_itemsize: int, out_itemsize: int) -> int:
    return (M * K + N * K) * in_itemsize + M * N * out_itemsize
