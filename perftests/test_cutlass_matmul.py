"""CUTLASS's Python DSL (CuTe DSL) Hopper GEMMs (perftests/kernels/cutlass_gemm.py) against cuBLAS, the persistent
Triton kernel and the Gluon fp8 kernel; and the chapter's own framing, one CUTLASS GEMM against a K-chunked
torch.matmul loop.

y = x @ w.T, x (M, K), w (N, K): the nn.Linear layout, as in test_triton_matmul.py, at its shapes. The GPU cases
need a Hopper GPU and the DSL (lab/device/cutlass_check.sh stages it there with tools/stage_cutlass.py); elsewhere
they skip, saying which is missing. The tests that need neither check the launcher's arguments and the tile
arithmetic, and, where the DSL is installed, compile both kernels for sm_90a without a GPU.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perftests.kernels import cutlass_gemm as cg
from perftests.kernels import matmul as mm
from perftests.support import gluon_build
from perftests.support.inputs import compare_on_inputs, generator
from perftests.support.matmul import fp8_operands, fp8_reference, operands, scaled_mm
from perftests.support.tolerance import reduction_atol
from perftests.test_triton_matmul import GPU_SHAPES, GRAPHED_SHAPES

NO_INTERPRETER = ("CuTe DSL kernels have no interpreter: they run on a Hopper GPU "
                  "(test_cutlass_kernels_build_for_hopper compiles them for sm_90a here when the DSL is installed)")
# Shapes the timed cases never reach: one tile; a partial tile in M, N and K (TMA zero-fills the loads and clips
# the stores); an odd number of row tiles (the second CTA of the last 2-CTA cluster has no rows to write); fewer
# tiles than SMs; a tile count no multiple of the persistent grid.
EDGE_SHAPES = [(128, 256, 128), (200, 136, 80), (1152, 2304, 640), (4224, 8448, 384), (1280, 768, 1024)]
K_CHUNK = 512  # the chapter's baseline: K in chunks of 512, one torch.matmul each


def gpu_reason(device: str) -> str | None:
    """Why the CUTLASS kernels cannot run here, or None."""
    if device != "cuda":
        return NO_INTERPRETER
    return cg.hopper_reason(torch.device("cuda")) or cg.DSL_MISSING


def skip_unless_runnable(device: str) -> None:
    if reason := gpu_reason(device):
        pytest.skip(reason)


def skip_without_dsl() -> None:
    """For the checks that need the DSL but no GPU. CI installs it (tox.ini, the version tools/stage_cutlass.py
    stages for the GPU machine) and sets SPEEDGATE_REQUIRE_CUTLASS_DSL: there a missing DSL fails, it never skips."""
    if cg.DSL_MISSING:
        if os.environ.get("SPEEDGATE_REQUIRE_CUTLASS_DSL"):
            pytest.fail(f"SPEEDGATE_REQUIRE_CUTLASS_DSL is set, but {cg.DSL_MISSING}")
        pytest.skip(cg.DSL_MISSING)


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w)


def rel_l2(actual: torch.Tensor, exact: torch.Tensor) -> float:
    return float((actual.float() - exact).norm() / exact.norm())


@pytest.mark.parametrize("shape_id", ["4096", "8192", "llm"])
def test_cutlass_matmul(perf, held_reference, device: str, shape_id: str) -> None:
    """bf16: the CUTLASS kernel computes F.linear's product (every element written), then is timed against cuBLAS
    and against the persistent Triton kernel on the same input sets."""
    skip_unless_runnable(device)
    M, N, K = GPU_SHAPES[shape_id]
    make = lambda seed: operands(device, torch.bfloat16, M, N, K, generator(device, seed))  # noqa: E731
    x, w = make(0)
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    cg.matmul(x, w, out=out)
    expected = F.linear(x, w)
    tol = dict(rtol=1.6e-2, atol=reduction_atol(expected, K))
    perf.assert_close(out, expected, **tol)
    work = dict(flops=mm.matmul_flops(M, N, K), flops_dtype="bf16")
    cutlass = lambda x, w: cg.matmul(x, w)  # noqa: E731
    triton = lambda x, w: mm.matmul_tma_persistent(x, w)  # noqa: E731
    held = held_reference(mm._matmul_tma_persistent_kernel, "vs_triton", lambda: triton(x, w))
    compare_on_inputs(perf, linear, cutlass, make, name="vs_cublas", **tol, **work, config=cg.config_record("16bit"))
    compare_on_inputs(perf, triton, cutlass, make, name="vs_triton", **tol, **work, config=held)


@pytest.mark.parametrize("shape_id", ["4096", "8192", "llm"])
def test_cutlass_fp8_matmul(perf, held_reference, device: str, shape_id: str) -> None:
    """fp8 (e4m3, per-tensor scales) with precise accumulation: _scaled_mm's product within bf16 tolerance and no
    less accurate than _scaled_mm against the exact product of the same operands (fast accumulation would be), then
    timed against _scaled_mm, the persistent Triton kernel and the Gluon kernel (both precise too)."""
    skip_unless_runnable(device)
    M, N, K = GPU_SHAPES[shape_id]
    make = lambda seed: fp8_operands(device, M, N, K, seed)  # noqa: E731
    x8, w8, sx, sw = make(0)
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    cg.matmul(x8, w8, scale_x=sx, scale_w=sw, out=out)
    expected = scaled_mm(x8, w8, sx, sw)
    tol = dict(rtol=1.6e-2, atol=reduction_atol(expected, K))
    perf.assert_close(out, expected, **tol)
    exact = (x8.float() @ w8.float().t()) * (sx * sw)
    ours, vendor = rel_l2(out, exact), rel_l2(expected, exact)
    del exact
    # Both round the same fp32 sum to bf16 (about 2^-9 relative): precise accumulation adds nothing visible to that.
    assert ours <= 1.1 * vendor + 1e-5, f"fp8 error {ours:.3e} vs _scaled_mm's {vendor:.3e} (relative L2): not precise"

    work = dict(flops=mm.matmul_flops(M, N, K), flops_dtype="fp8", graph=shape_id in GRAPHED_SHAPES)
    cutlass = lambda x8, w8, sx, sw: cg.matmul(x8, w8, scale_x=sx, scale_w=sw)  # noqa: E731
    triton = lambda x8, w8, sx, sw: mm.matmul_tma_persistent(x8, w8, scale_x=sx, scale_w=sw)  # noqa: E731
    held = held_reference(mm._matmul_tma_persistent_kernel, "vs_triton", lambda: triton(x8, w8, sx, sw))
    compare_on_inputs(perf, scaled_mm, cutlass, make, name="vs_scaled_mm", **tol, **work,
                      config=cg.config_record("fp8_precise", in_dtype=torch.float8_e4m3fn))
    compare_on_inputs(perf, triton, cutlass, make, name="vs_triton", **tol, **work, config=held)
    if gluon_build.not_on_hopper(device, "test_gluon_fp8_kernel_builds_for_hopper") is None:
        from perftests.kernels import matmul_gluon

        gluon = lambda x8, w8, sx, sw: matmul_gluon.fp8_matmul(x8, w8, sx, sw)  # noqa: E731
        compare_on_inputs(perf, gluon, cutlass, make, name="vs_gluon", **tol, **work)


def k_chunked_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The chapter's baseline: x @ w.T as a Python loop over K in chunks of K_CHUNK, one torch.matmul a chunk (each
    rounded to bf16), summed in fp32, rounded once at the end."""
    acc = torch.matmul(x[:, :K_CHUNK], w[:, :K_CHUNK].t()).float()
    for k in range(K_CHUNK, x.shape[1], K_CHUNK):
        acc += torch.matmul(x[:, k:k + K_CHUNK], w[:, k:k + K_CHUNK].t())
    return acc.to(x.dtype)


def test_cutlass_vs_k_chunked_matmul(perf, device: str) -> None:
    """The chapter's framing (baseline_cutlass / optimized_cutlass): one CUTLASS GEMM against the K-chunked
    torch.matmul loop at 4096^3 bf16. The loop rounds each chunk's product to bf16 before the fp32 sum: each such
    rounding is at most 2^-9 of that chunk's largest value, and the bound adds them up."""
    skip_unless_runnable(device)
    M, N, K = GPU_SHAPES["4096"]
    make = lambda seed: operands(device, torch.bfloat16, M, N, K, generator(device, seed))  # noqa: E731
    x, w = make(0)
    chunks = [torch.matmul(x[:, k:k + K_CHUNK], w[:, k:k + K_CHUNK].t()) for k in range(0, K, K_CHUNK)]
    chunk_rounding = sum(2.0**-9 * float(c.abs().max().float()) for c in chunks)
    del chunks
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    cg.matmul(x, w, out=out)
    expected = k_chunked_matmul(x, w)
    # Twice the first set's chunk bound: the other input sets are drawn from the same distribution.
    tol = dict(rtol=1.6e-2, atol=reduction_atol(expected, K) + 2 * chunk_rounding)
    perf.assert_close(out, expected, **tol)
    # Timed in milliseconds (the loop is not tensor-core-bound: timers.cycles.counts_cycles), so the speedup carries
    # the clock each card runs the CUTLASS GEMM at, in the same cycles on every card: the spread its band holds
    # (docs/results/gate-study-h200.md, "Two more fresh cards under -n 2").
    compare_on_inputs(perf, k_chunked_matmul, lambda x, w: cg.matmul(x, w), make, name="vs_k_chunked_torch_matmul", **tol,
                      flops=mm.matmul_flops(M, N, K), flops_dtype="bf16", config=cg.config_record("16bit"))


@pytest.mark.parametrize("M, N, K", EDGE_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
def test_cutlass_edge_shapes(device: str, M: int, N: int, K: int, dtype: torch.dtype) -> None:
    """Both kernels compute the vendor's product (fp8: fp8_reference) at shapes that test the tile loop, the clusters and the ring's
    phases, each output element written (the output starts as NaN)."""
    skip_unless_runnable(device)
    out = torch.full((M, N), float("nan"), device=device, dtype=torch.bfloat16)
    if dtype == torch.bfloat16:
        x, w = operands(device, dtype, M, N, K, generator(device, 0))
        cg.matmul(x, w, out=out)
        expected = F.linear(x, w)
    else:
        x8, w8, sx, sw = fp8_operands(device, M, N, K, 0)
        cg.matmul(x8, w8, scale_x=sx, scale_w=sw, out=out)
        expected = fp8_reference(x8, w8, sx, sw)  # _scaled_mm refuses (200, 136, 80): zero-padded there
    torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=reduction_atol(expected, K))


# ------------------------------------------------------------------------------------------------------------------
# Anywhere: the launcher's checks, the tile arithmetic, and (where the DSL is installed) the sm_90a build.
# ------------------------------------------------------------------------------------------------------------------


def misaligned(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous tensor whose data starts one element past a 16-byte boundary."""
    flat = torch.zeros(math.prod(shape) + 1, dtype=torch.float32).to(dtype)
    return flat[1:].view(shape)


def fp8(*shape: int) -> torch.Tensor:
    return torch.zeros(shape).to(torch.float8_e4m3fn)


def test_cutlass_launcher_checks() -> None:
    """plan() takes what the kernels compute and names what is wrong with anything else; matmul() off a GPU says
    so before it needs the DSL."""
    bf = lambda *s: torch.zeros(s, dtype=torch.bfloat16)  # noqa: E731
    one = torch.ones((), dtype=torch.float32)
    assert cg.plan(bf(256, 64), bf(128, 64)) == cg.Problem(256, 128, 64, "16bit", torch.bfloat16, torch.bfloat16)
    assert cg.plan(torch.zeros(8, 16, dtype=torch.float16), torch.zeros(8, 16, dtype=torch.float16)).kind == "16bit"
    fp8_problem = cg.plan(fp8(64, 32), fp8(16, 32), scale_x=one, scale_w=one)
    assert fp8_problem == cg.Problem(64, 16, 32, "fp8_precise", torch.float8_e4m3fn, torch.bfloat16)
    assert cg.plan(bf(4, 8), bf(8, 8), out=bf(4, 8)).N == 8
    bad = [
        ((bf(4, 8), bf(8, 16)), {}, "expected x \\(M, K\\) and w \\(N, K\\)"),
        ((bf(4, 8, 1), bf(8, 8)), {}, "expected x"),
        ((bf(0, 8), bf(8, 8)), {}, "empty problem"),
        ((bf(4, 8), torch.zeros(8, 8, dtype=torch.float16)), {}, "share a dtype"),
        ((torch.zeros(4, 8), torch.zeros(8, 8)), {}, "bfloat16, float16 or float8_e4m3fn"),
        ((bf(4, 8), bf(8, 8)), {"scale_x": one, "scale_w": one}, "scales are for fp8"),
        ((fp8(4, 16), fp8(16, 16)), {}, "need both scale_x and scale_w"),
        ((fp8(4, 16), fp8(16, 16)), {"scale_x": one}, "need both"),
        ((fp8(4, 16), fp8(16, 16)), {"scale_x": torch.ones(2), "scale_w": one}, "scale_x must be one fp32 value"),
        ((fp8(4, 16), fp8(16, 16)), {"scale_x": one, "scale_w": one.double()}, "scale_w must be one fp32 value"),
        ((bf(8, 4).t(), bf(8, 8)), {}, "x must be row-major"),
        ((bf(4, 16), bf(16, 32)[:, :16]), {}, "w must be row-major"),
        ((misaligned((4, 8), torch.bfloat16), bf(8, 8)), {}, "x's data must start on a 16-byte boundary"),
        ((bf(4, 12), bf(8, 12)), {}, "K \\* itemsize = 24 bytes"),
        ((fp8(4, 24), fp8(16, 24)), {"scale_x": one, "scale_w": one}, "K \\* itemsize = 24 bytes"),
        ((bf(4, 8), bf(12, 8)), {}, "N \\* torch.bfloat16 itemsize"),
        ((bf(4, 8), bf(8, 8)), {"out": bf(8, 4)}, "out must be a contiguous \\(4, 8\\) torch.bfloat16"),
        ((bf(4, 8), bf(8, 8)), {"out": torch.zeros(4, 8)}, "out must be"),
        ((bf(4, 8), bf(8, 8)), {"out": bf(8, 4).t()}, "out must be"),
        ((fp8(4, 16), fp8(16, 16)), {"scale_x": one, "scale_w": one, "out": fp8(4, 16)}, "out must be a contiguous \\(4, 16\\) torch.bfloat16"),
    ]
    for args, kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            cg.plan(*args, **kwargs)
    with pytest.raises(ValueError, match="share a dtype"):  # the launcher checks before anything else
        cg.matmul(bf(4, 8), torch.zeros(8, 8, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="run on a Hopper GPU; the operands are on cpu"):
        cg.matmul(bf(4, 8), bf(8, 8))


def test_fp8_reference_pads_shapes_the_vendor_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8_reference hands torch._scaled_mm only K and N that are multiples of 16 (it refuses others), zero-padded,
    and the product cut back is the unpadded one's (here with an exact stand-in for the vendor's GEMM)."""
    from perftests.support import matmul as support

    seen = []

    def exact(x8: torch.Tensor, w8: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
        seen.append((tuple(x8.shape), tuple(w8.shape)))
        return ((x8.float() @ w8.float().t()) * (sx * sw)).to(torch.bfloat16)

    monkeypatch.setattr(support, "scaled_mm", exact)
    x8, w8, sx, sw = fp8_operands("cpu", 200, 136, 80, 0)
    padded = support.fp8_reference(x8, w8, sx, sw)
    assert seen == [((200, 80), (144, 80))]  # N 136 -> 144; K 80 is a multiple already
    assert padded.shape == (200, 136) and padded.is_contiguous()
    assert torch.equal(padded, exact(x8, w8, sx, sw))
    support.fp8_reference(*fp8_operands("cpu", 64, 32, 48, 1))
    assert seen[-1] == ((64, 48), (32, 48))  # multiples of 16: as they are


def test_cutlass_tile_arithmetic() -> None:
    """The numbers the kernels are built from: a stage holds 128 bytes of K, the ring fits beside the epilogue's
    buffers in sm_90's 227 KiB, fp8's partial sum fits beside its accumulator, and configs the kernel cannot build
    are refused by name."""
    bf16, e4m3 = torch.bfloat16, torch.float8_e4m3fn
    config = cg.DEFAULT_CONFIG
    assert (config.tile_m, config.tile_n, config.cluster_m, config.cluster_n) == (128, 256, 2, 1)
    assert (cg.k_tile(bf16), cg.k_tile(e4m3)) == (64, 128)
    assert (cg.mma_width(config, "16bit"), cg.mma_width(config, "fp8_precise")) == (256, 128)
    for dtype in (bf16, e4m3):
        ring = cg.stages(config, dtype, bf16)
        stage_bytes = (config.tile_m + config.tile_n) * cg.k_tile(dtype) * dtype.itemsize
        assert ring == 4 and stage_bytes == 48 * 1024
        used = cg.BARRIER_BYTES + ring * stage_bytes + config.tile_m * config.epilogue_n * 2 * config.epilogue_stages
        assert used <= cg.SMEM_BYTES < used + stage_bytes  # as many stages as fit, no more
    # 64 x 256 fp32 per consumer thread (128 registers), plus fp8's 64 x 128 partial (64): under setmaxnreg's 232.
    assert (cg.accumulator_registers(config, "16bit"), cg.accumulator_registers(config, "fp8_precise")) == (128, 192)
    assert 2 * 128 * cg.CONSUMER_REGISTERS + 128 * cg.PRODUCER_REGISTERS <= 65536
    assert cg.tile_count(8192, 28672) == 64 * 112 and cg.tile_count(200, 136) == 2
    for bad, message in (({"tile_n": 512}, "tile_n must be"), ({"tile_m": 96}, "tile_m must be"),
                         ({"cluster_m": 3}, "cluster_m must be"), ({"cluster_m": 4, "cluster_n": 2}, "over the 4"),
                         ({"swizzle": 0}, "swizzle must be"), ({"epilogue_n": 48}, "epilogue_n"),
                         ({"epilogue_stages": 9}, "epilogue_stages must be 2 to tile_n / epilogue_n \\(8\\), got 9")):
        with pytest.raises(ValueError, match=message):
            cg.GemmConfig(**bad)
    wide_epilogue = cg.GemmConfig(tile_m=256, tile_n=256, epilogue_n=128, epilogue_stages=2)
    with pytest.raises(ValueError, match="stage"):
        cg.HopperGemm(cg.Problem(256, 256, 64, "16bit", bf16, bf16), wide_epilogue)


def test_cutlass_kernels_build_for_hopper() -> None:
    """Both kernels compile for sm_90a without a GPU: wgmma at the widths chosen (64x256x16 bf16; fp8 as 64x128x32
    parts with the promotion adds between), TMA loads (w's multicast to the cluster) and stores, stmatrix, the
    producer's and consumers' register budgets by setmaxnreg, no local memory (no spills), within shared memory."""
    skip_without_dsl()
    for kind, dtype, mma in (("16bit", torch.bfloat16, "HGMMA.64x256x16.F32.BF16"),
                             ("fp8_precise", torch.float8_e4m3fn, "QGMMA.64x128x32.F32.E4M3.E4M3")):
        report = cg.compile_report(cg.Problem(4096, 4096, 4096, kind, dtype, torch.bfloat16))
        ops = report["opcodes"]
        k_blocks = 4  # 128 bytes of K per stage over the wgmma's 32 bytes of K
        assert ops.get(mma, 0) >= k_blocks * (cg.DEFAULT_CONFIG.tile_n // cg.mma_width(cg.DEFAULT_CONFIG, kind)), (kind, ops)
        for op in ("UTMALDG.2D", "UTMALDG.2D.MULTICAST", "UTMASTG.2D", "STSM.16.M88.4", "USETMAXREG.DEALLOC.CTAPOOL",
                   "USETMAXREG.TRY_ALLOC.CTAPOOL"):
            assert ops.get(op, 0) >= 1, (kind, op, ops)
        assert report["local"] == 0 and report["stack"] == 0, (kind, report)
        assert report["reg"] <= 65536 // 384 and report["dynamic_smem"] + report["shared"] <= cg.SMEM_BYTES, (kind, report)
        # fp8's promotion: 64 x 256 fp32 adds a thread per K tile (the 16-bit kernel adds nothing in its loop).
        assert ops.get("FADD", 0) == (128 if kind == "fp8_precise" else 0), (kind, ops.get("FADD"))


def test_the_gate_reads_a_cutlass_kernels_codegen_facts_from_its_compile(device: str) -> None:
    """What the gate records of the CUTLASS kernel beside its launch (speedgate.codegen.cute_facts): the compile keeps
    its PTX and cubin in memory, and the facts name the kernel as the profiler does, with the PTX's instruction mix
    (wgmma, the bulk tensor copies) and the cubin's registers and spills, the same as ptxas's own report
    (cg.compile_report), and leave no file behind in the working folder."""
    if device == "cuda":
        pytest.skip("checked where the suite runs on the CPU (CI, which installs the DSL): compiled, not run")
    skip_without_dsl()
    from speedgate import codegen

    before = set(Path.cwd().iterdir())
    problem = cg.Problem(4096, 4096, 4096, "16bit", torch.bfloat16, torch.bfloat16)
    compiled = cg.compile_gemm(problem, max_active_clusters=66)
    assert set(Path.cwd().iterdir()) == before  # the DSL's kept copies went to a folder of their own
    facts = codegen.compiled_facts(compiled)
    assert facts["name"].startswith("kernel_cutlass_kernel_perftestskernelscutlass_gemmHopperGemm"), facts["name"]
    assert facts["ptx"]["mma"] > 0 and facts["ptx"]["tma"] > 0, facts["ptx"]
    report = cg.compile_report(problem)
    assert (facts["registers"], facts["spills"]) == (report["reg"], report["local"] // 4) == (report["reg"], 0)


@pytest.mark.parametrize("kind", ["16bit", "fp8_precise"])
def test_cutlass_register_layouts(device: str, kind: str) -> None:
    """What the kernels store is what they computed: fp8's partial sums add into the accumulator elements of their
    own columns, and the epilogue's subtiles take the accumulator elements of their own rows and columns
    (cg.layout_check, at trace time, no GPU). The layouts are affine in the thread index: every lane of the first
    warp, and two lanes of each other warp, of both consumer warpgroups."""
    if device == "cuda":
        # Traced, never run: the same on every machine with the same DSL, and CI's is the version the GPU machine
        # stages. Tracing them is slow, and the GPU's time is the suite's scarcest (docs/results/suite-time.md).
        pytest.skip("checked where the suite runs on the CPU (CI, which installs the DSL): traced, not run, the same "
                    "on every device")
    skip_without_dsl()
    threads = tuple(range(32)) + tuple(w * 32 + lane for w in range(1, 8) for lane in (5, 31))
    dtype = torch.bfloat16 if kind == "16bit" else torch.float8_e4m3fn
    assert cg.layout_check(cg.Problem(4096, 4096, 4096, kind, dtype, torch.bfloat16), threads=threads) == {"part": 0, "epilogue": 0}
