"""Matmul in Triton against cuBLAS (torch.matmul / F.linear): tiled + autotuned, persistent + TMA, fused
bias + GELU epilogue, and FP8 (e4m3, per-tensor scales) against torch._scaled_mm and against bf16 cuBLAS.

y = x @ w.T, x (M, K), w (N, K): the nn.Linear layout. Each case records the autotuner's chosen config.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from perftests.kernels import matmul as mm
from perftests.support import gluon_build
from perftests.support.compiled import compare_with_compiled
from perftests.support.inputs import compare_on_inputs, generator
from perftests.support.matmul import fp8_operands, operands, scaled_mm, scaled_mm_fast
from perftests.support.tolerance import intermediate_rounding_atol, reduction_atol

pytestmark = pytest.mark.triton

GPU_SHAPES = {"4096": (4096, 4096, 4096), "8192": (8192, 8192, 8192), "llm": (8192, 28672, 4096)}
# Not multiples of the interpreter's 32-wide tiles, so edge tiles are exercised; K and N keep TMA's 16-byte rows.
CPU_SHAPE = (100, 80, 80)
# fp8 at 4096^3 runs in about 0.1 ms, and its launch (three TMA descriptors, the autotuner's lookup) costs tens of
# microseconds on the host: timed as CUDA-graph replays. See docs/NOTES.md (the slow mode of this case).
GRAPHED_SHAPES = {"4096"}
# Every kernel rotates input sets, the persistent TMA one included. Its launcher builds TMA descriptors on the host
# for each new tensor; the rounds time device work (the timer holds the device while the host queues), so that host
# work does not read as kernel time (docs/results/kernel-comments.md, "Test files").

BF16_ON_CPU = "bf16 tl.dot under the Triton interpreter multiplies raw bit patterns: bf16 runs on the GPU only"


def dims(device: str, shape_id: str) -> tuple[int, int, int]:
    return GPU_SHAPES[shape_id] if device == "cuda" else CPU_SHAPE


# Eager references as functions of their tensors, so that torch.compile sees the same function every time.
def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w)


def linear_bias_gelu(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, bias), approximate="tanh")


def skip_bf16_on_cpu(device: str, dtype: torch.dtype) -> None:
    if device == "cpu" and dtype == torch.bfloat16:
        pytest.skip(BF16_ON_CPU)


@pytest.mark.parametrize(
    ("shape_id", "dtype"),
    [("4096", torch.bfloat16), ("8192", torch.bfloat16), ("llm", torch.bfloat16), ("4096", torch.float16)],
    ids=["4096-bfloat16", "8192-bfloat16", "llm-bfloat16", "4096-float16"],
)
@pytest.mark.parametrize("kernel", ["tiled", "tma_persistent"])
def test_matmul(perf, hold_blessed, device: str, kernel: str, shape_id: str, dtype: torch.dtype) -> None:
    skip_bf16_on_cpu(device, dtype)
    M, N, K = dims(device, shape_id)
    make = lambda seed: operands(device, dtype, M, N, K, generator(device, seed))  # noqa: E731
    x, w = make(0)
    out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
    launch, tuner = mm.launcher(kernel)
    hold_blessed(tuner, "vs_cublas")
    launch(x, w, out=out)
    expected = F.linear(x, w)
    tol = dict(rtol=1.6e-2 if dtype == torch.bfloat16 else 1e-3, atol=reduction_atol(expected, K))
    perf.assert_close(out, expected, **tol)
    work = dict(flops=mm.matmul_flops(M, N, K), flops_dtype="bf16" if dtype == torch.bfloat16 else "fp16")
    optimized = lambda x, w: launch(x, w)  # noqa: E731
    compare_on_inputs(perf, linear, optimized, make, name="vs_cublas", **tol, **work, config=mm.best_config(tuner))
    compare_with_compiled(perf, device, linear, optimized, make, **tol, **work)


@pytest.mark.parametrize("shape_id", ["4096", "8192"])
@pytest.mark.parametrize("kernel", ["tiled", "tma_persistent"])
def test_matmul_bias_gelu(perf, hold_blessed, device: str, kernel: str, shape_id: str) -> None:
    launch, tuner = mm.launcher(kernel)
    hold_blessed(tuner, "vs_eager")
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    M, N, K = dims(device, shape_id)

    def make(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = generator(device, seed)
        x, w = operands(device, dtype, M, N, K, g)
        return x, w, torch.randn(N, generator=g, device=device, dtype=dtype)

    x, w, bias = make(0)
    out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
    launch(x, w, bias, "gelu_tanh", out=out)
    expected = linear_bias_gelu(x, w, bias)
    # Eager rounds the GEMM output and then the biased pre-activation to 16 bits before the GELU; the fused
    # epilogue rounds once, at the end. Those two roundings are each up to half a unit of the pre-activation's
    # magnitude, and |GELU'| <= 1.13 carries them through: an absolute bound at the pre-activation's scale.
    pre = F.linear(x, w, bias)
    tol = dict(
        rtol=1.6e-2 if dtype == torch.bfloat16 else 1e-3,
        atol=reduction_atol(expected, K) + intermediate_rounding_atol(pre, dtype, factor=2 * 1.13),
    )
    del pre
    perf.assert_close(out, expected, **tol)
    fused = lambda x, w, bias: launch(x, w, bias, "gelu_tanh")  # noqa: E731
    work = dict(flops=mm.matmul_flops(M, N, K), flops_dtype="bf16" if dtype == torch.bfloat16 else "fp16")
    compare_on_inputs(perf, linear_bias_gelu, fused, make, name="vs_eager", **tol, **work, config=mm.best_config(tuner))
    compare_with_compiled(perf, device, linear_bias_gelu, fused, make, **tol, **work)


@pytest.mark.parametrize("shape_id", ["4096", "8192"])
@pytest.mark.parametrize("kernel", ["tiled", "tma_persistent"])
def test_fp8_matmul(perf, hold_blessed, device: str, kernel: str, shape_id: str) -> None:
    launch, tuner = mm.launcher(kernel)
    hold_blessed(tuner, "vs_scaled_mm")
    M, N, K = dims(device, shape_id)
    make = lambda seed: fp8_operands(device, M, N, K, seed)  # noqa: E731
    x8, w8, sx, sw, xb, wb = fp8_operands(device, M, N, K, 0, bf16=True)
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    fp8 = lambda x8, w8, sx, sw, *unquantized: launch(x8, w8, scale_x=sx, scale_w=sw)  # noqa: E731
    launch(x8, w8, scale_x=sx, scale_w=sw, out=out)
    expected = scaled_mm(x8, w8, sx, sw)
    tol = dict(rtol=1.6e-2, atol=reduction_atol(expected, K))
    perf.assert_close(out, expected, **tol)
    flops = mm.matmul_flops(M, N, K)
    on_inputs = dict(graph=shape_id in GRAPHED_SHAPES)
    compare_on_inputs(perf, scaled_mm, fp8, make, name="vs_scaled_mm", **tol, flops=flops, flops_dtype="fp8",
                      config=mm.best_config(tuner), **on_inputs)
    compare_with_compiled(perf, device, scaled_mm, fp8, make, **tol, flops=flops, flops_dtype="fp8", **on_inputs)

    # Against bf16 cuBLAS on the unquantized data: a precision change by design, so the outputs are not
    # held to bf16 tolerance; e4m3's 3 mantissa bits bound each operand's error by 2^-4 relative, and
    # the relative L2 error of the product by about 2^-4 * sqrt(2) ~= 0.09.
    rel = float((out.float() - F.linear(xb, wb).float()).norm() / F.linear(xb, wb).float().norm())
    assert rel < 0.09, f"fp8 result is {rel:.3f} (relative L2) from bf16: more than e4m3 quantization explains"
    with_bf16 = lambda seed: fp8_operands(device, M, N, K, seed, bf16=True)  # noqa: E731
    bf16_linear = lambda x8, w8, sx, sw, xb, wb: F.linear(xb, wb)  # noqa: E731
    compare_on_inputs(perf, bf16_linear, fp8, with_bf16, name="vs_bf16_cublas_precision_change", check=False, flops=flops,
                      flops_dtype="fp8", **on_inputs)


@pytest.mark.parametrize("shape_id", ["4096", "8192"])
def test_fp8_matmul_gluon(perf, held_reference, device: str, shape_id: str) -> None:
    """The Gluon fp8 matmul with precise accumulation (perftests/kernels/matmul_gluon.py: one warpgroup's promotion
    adds under the other's MMAs, a loader partition feeding both, one program an SM) against _scaled_mm and against
    the Triton persistent kernel above, same operands and tolerance as test_fp8_matmul."""
    if reason := gluon_build.not_on_hopper(device, "test_gluon_fp8_kernel_builds_for_hopper"):
        pytest.skip(reason)
    from perftests.kernels import matmul_gluon

    M, N, K = dims(device, shape_id)
    make = lambda seed: fp8_operands(device, M, N, K, seed)  # noqa: E731
    x8, w8, sx, sw = make(0)
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    matmul_gluon.fp8_matmul(x8, w8, sx, sw, out=out)
    expected = scaled_mm(x8, w8, sx, sw)
    tol = dict(rtol=1.6e-2, atol=reduction_atol(expected, K))
    perf.assert_close(out, expected, **tol)
    gluon = lambda x8, w8, sx, sw: matmul_gluon.fp8_matmul(x8, w8, sx, sw)  # noqa: E731
    triton_fp8 = lambda x8, w8, sx, sw: mm.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw)  # noqa: E731
    work = dict(flops=mm.matmul_flops(M, N, K), flops_dtype="fp8", graph=shape_id in GRAPHED_SHAPES)
    config = {"gluon": {"BLOCK_M": matmul_gluon.BLOCK_M, "BLOCK_N": matmul_gluon.BLOCK_N,
                        "BLOCK_K": matmul_gluon.BLOCK_K, "num_stages": matmul_gluon.STAGES},
              "form": "halves, loader partition, persistent"}
    compare_on_inputs(perf, scaled_mm, gluon, make, name="vs_scaled_mm", **tol, **work, config=config)
    held = held_reference(mm._matmul_tma_persistent_kernel, "vs_triton", lambda: triton_fp8(x8, w8, sx, sw))
    compare_on_inputs(perf, triton_fp8, gluon, make, name="vs_triton", **tol, **work, config=held)


# Shapes the timed cases never reach: one tile and one K tile; fewer K tiles than ring slots; fewer tiles than SMs;
# a tile count no multiple of the SMs (the persistent loop's last round uneven); a non-square grouping remainder.
GLUON_EDGE_SHAPES = [(128, 256, 128), (256, 512, 256), (1152, 2304, 640), (4224, 8448, 384), (1280, 768, 1024)]


@pytest.mark.parametrize("M, N, K", GLUON_EDGE_SHAPES, ids=lambda v: str(v))
def test_fp8_matmul_gluon_edge_shapes(device: str, M: int, N: int, K: int) -> None:
    """The Gluon fp8 matmul computes _scaled_mm's product at shapes that test the tile loop and the ring's phases,
    each output element written (the output starts as NaN). Its other forms: lab/tests/test_matmul_gluon_forms.py."""
    if reason := gluon_build.not_on_hopper(device, "test_gluon_fp8_kernel_builds_for_hopper"):
        pytest.skip(reason)
    from perftests.kernels import matmul_gluon

    x8, w8, sx, sw = fp8_operands(device, M, N, K, 0)
    expected = scaled_mm(x8, w8, sx, sw)
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    matmul_gluon.fp8_matmul(x8, w8, sx, sw, out=out)
    torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=reduction_atol(expected, K))


def rel_l2(actual: torch.Tensor, exact: torch.Tensor) -> float:
    return float((actual.float() - exact).norm() / exact.norm())


@pytest.mark.parametrize("shape_id", ["4096", "8192"])
@pytest.mark.parametrize("kernel", ["tiled", "tma_persistent"])
def test_fp8_matmul_fast_accum(perf, hold_blessed, device: str, kernel: str, shape_id: str) -> None:
    """FP8 with the MMAs' reduced-precision accumulation kept over all of K, against the vendor's same mode.

    A precision trade, so named: both sides are held to the exact product of the same fp8 operands (fp32
    products summed in fp64-free fp32 on upcast inputs), and ours must be no less accurate than the vendor's
    fast mode, within a factor of two, rather than to bf16 tolerance against each other.
    """
    if device != "cuda":
        pytest.skip("fast accumulation is a property of Hopper's fp8 MMAs; the interpreter's dot is exact")
    launch, tuner = mm.launcher(kernel)
    hold_blessed(tuner, "vs_scaled_mm_fast_accum")
    M, N, K = dims(device, shape_id)
    make = lambda seed: fp8_operands(device, M, N, K, seed)  # noqa: E731
    x8, w8, sx, sw = make(0)
    fast = lambda x8, w8, sx, sw: launch(x8, w8, scale_x=sx, scale_w=sw, fp8_fast_accum=True)  # noqa: E731
    exact = (x8.float() @ w8.float().t()) * (sx * sw)
    ours, vendor = rel_l2(fast(x8, w8, sx, sw), exact), rel_l2(scaled_mm_fast(x8, w8, sx, sw), exact)
    assert ours <= max(2 * vendor, 2.0**-9), f"fast-accum error {ours:.2e} vs the vendor's {vendor:.2e} (relative L2)"
    del exact
    compare_on_inputs(
        perf, scaled_mm_fast, fast, make, graph=shape_id in GRAPHED_SHAPES, name="vs_scaled_mm_fast_accum",
        check=False, flops=mm.matmul_flops(M, N, K), flops_dtype="fp8", config=mm.best_config(tuner),
    )


def test_gluon_fp8_kernel_builds_for_hopper() -> None:
    """The Gluon fp8 matmul (perftests/kernels/matmul_gluon.py) compiles for sm_90 on any machine
    (perftests/support/gluon_build.py) in its own form with no ptxas note and no spill, two consumer warpgroups each
    running its own K loop inside the loop over output tiles: two MMA halves, each waited for before its promotion
    add. The lab's forms are built by lab/tests."""
    built = gluon_build.build("""
import json
from perftests.support.gluon_build import dot_ops, gluon_fp8_matmul, ptxas_report
built = gluon_fp8_matmul("ptx")
print(json.dumps(dict(ops=dot_ops(built["ttgir"]), **ptxas_report(built["ptx"]))))
""")
    half = ["dot async", "wait pendings=0"]
    assert built["notes"] == [] and built["spill_stores"] == 0, built
    assert gluon_build.loops(built["ops"]) == [half * 2, half * 2], built["ops"]


def test_hold_runs_the_blessed_candidate_and_gives_the_others_back() -> None:
    """The autotuner held to a blessed config runs it without a race (one candidate); the candidates come back after;
    a config that is no longer a candidate leaves the race as it was (the report then names the change)."""
    import triton

    from perftests.kernels.common import hold, plain_config

    class Tuner:
        configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=8, num_stages=3) for m, n in ((128, 256), (256, 128))]

    tuner = Tuner()
    candidates = list(tuner.configs)
    restore = hold(tuner, {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3})
    assert [plain_config(c) for c in tuner.configs] == [{"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3}]
    restore()
    assert tuner.configs == candidates
    for gone in ({"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}, None):
        restore = hold(tuner, gone)
        assert tuner.configs == candidates
        restore()
        assert tuner.configs == candidates
