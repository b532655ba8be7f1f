"""Multi-GPU: a quantized all-reduce (Triton int8 block quantization around NCCL all_to_all / all_gather) against
NCCL's bf16 all-reduce, its pipelined form, and a bucketed gradient all-reduce overlapped with backward.

Each case runs on every visible GPU, one process per GPU (speedgate.launch.run_ranks), for any count from 2.
Samples are the slowest rank's time per call (speedgate.distributed); results go to the baseline file of the key
'<N>x-<gpu>' (for example baselines/2x-nvidia-h200.json). Every case is timed held: the devices' work alone,
without the hosts' launches and the skew between the hosts, which set the all-reduce cases' spread when every call
was started from idle (docs/results/allreduce.md). The algorithms are in
perftests/kernels/allreduce.py; what each rank runs, and the error bound, in perftests/support/nccl_cases.py. The
quantization kernels themselves are checked on one device by test_quant_kernels, which runs on the CPU through the
interpreter too; the one-shot kernel, which no interpreter runs, is compiled for sm_90 on any machine by
test_oneshot_kernel_builds_for_hopper.
"""

from __future__ import annotations

import pytest
import torch

from perftests.kernels import quant
from perftests.kernels.common import INTERPRETING, best_config
from perftests.support import gluon_build
from perftests.support.inputs import generator

pytestmark = pytest.mark.nccl

SIZES_MB = (64, 256, 1024)
PIECES = 4
RANK_TIMEOUT_S = 300.0


def world_or_skip(device: str) -> int:
    if device != "cuda":
        pytest.skip("NCCL cases need at least 2 GPUs; this run has none (CPU)")
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"NCCL cases need at least 2 GPUs; {count} visible (under pytest-xdist each worker sees one: run them without -n)")
    return count


def launch(perf, target: str, payload: dict, world: int) -> tuple[dict, callable]:
    """Run target on every rank once (checks and timing), and a callable that re-runs the timing alone."""
    from speedgate.launch import run_ranks

    settings = dict(timing=perf.timing, policy=perf.policy.to_json())
    first = run_ranks(target, world, {**payload, **settings}, timeout_s=RANK_TIMEOUT_S)[0]
    taken = [first]

    def measure() -> dict:
        if taken:
            return taken.pop()["samples"]
        return run_ranks(target, world, {**payload, **settings, "check": False}, timeout_s=RANK_TIMEOUT_S)[0]["samples"]

    return first, measure


def assert_within_bound(result: dict, label: str) -> None:
    stats = result[label]
    assert stats["finite"], f"{label}: non-finite values in the all-reduced output"
    assert stats["max_error_over_bound"] <= 1.0, (
        f"{label}: an element's error is {stats['max_error_over_bound']:.3f}x the stated bound "
        f"(max abs error {stats['max_abs_error']:.3g}, relative L2 {stats['rel_l2']:.3g}); see perftests/support/nccl_cases.py")


@pytest.mark.parametrize("size_mb", SIZES_MB, ids=[f"{s}MB" for s in SIZES_MB])
def test_quantized_allreduce(perf, device: str, size_mb: int) -> None:
    world = world_or_skip(device)
    numel = size_mb * 2**20 // 2  # bf16
    result, measure = launch(perf, "perftests.support.nccl_cases:allreduce_case", dict(numel=numel, variant="quantized"), world)
    assert_within_bound(result, "quantized")
    perf.compare_samples(measure, name="vs_nccl_bf16", world_size=world, bytes=numel * 2.0)


@pytest.mark.parametrize("size_mb", SIZES_MB[1:], ids=[f"{s}MB" for s in SIZES_MB[1:]])
def test_pipelined_quantized_allreduce(perf, device: str, size_mb: int) -> None:
    world = world_or_skip(device)
    numel = size_mb * 2**20 // 2
    result, measure = launch(perf, "perftests.support.nccl_cases:allreduce_case",
                             dict(numel=numel, variant="pipelined", pieces=PIECES), world)
    assert_within_bound(result, "pipelined")
    perf.compare_samples(measure, name=f"pipelined_{PIECES}_vs_one_piece", world_size=world, bytes=numel * 2.0)


# Pieces per size: the fastest in a sweep of 1, 2, 4 and 8 (lab/allreduce_breakdown.py --pieces 1 2 4 8;
# docs/results/kernel-comments.md, "Test files").
P2P_PIECES = {256: 1, 1024: 4}


@pytest.mark.parametrize("size_mb", sorted(P2P_PIECES), ids=[f"{s}MB" for s in sorted(P2P_PIECES)])
def test_p2p_quantized_allreduce(perf, device: str, size_mb: int) -> None:
    """The wire on the copy engines (symmetric-memory peer copies) instead of NCCL's SM kernels."""
    world = world_or_skip(device)
    numel = size_mb * 2**20 // 2
    result, measure = launch(perf, "perftests.support.nccl_cases:allreduce_case",
                             dict(numel=numel, variant="p2p", pieces=P2P_PIECES[size_mb]), world)
    assert_within_bound(result, "quantized")
    assert_within_bound(result, "p2p")
    perf.compare_samples(measure, name="p2p_vs_nccl_bf16", world_size=world, bytes=numel * 2.0,
                         config={"pieces": P2P_PIECES[size_mb]})


# The one-shot kernel's tile, warps and waves per size (perftests/kernels/oneshot_allreduce.py; half its programs
# send): the fastest per size in lab/oneshot_forms.py's sweep (docs/results/allreduce.md, "2026-11-28, 2 x H200: the
# one-shot tile per size"). A smaller tile wins where there are few blocks per program; more waves where there are
# many.
ONESHOT_CONFIGS = {64: dict(rows=16, warps=16, waves=16), 256: dict(rows=32, warps=16, waves=32),
                   1024: dict(rows=32, warps=16, waves=32)}


def oneshot_configs() -> list[dict[str, int]]:
    """Every config the suite times, once each."""
    return [dict(c) for c in {tuple(sorted(c.items())): c for c in ONESHOT_CONFIGS.values()}.values()]


def two_or_skip(device: str) -> int:
    world = world_or_skip(device)
    if world != 2:
        pytest.skip(f"the one-shot all-reduce exchanges between exactly 2 GPUs; {world} visible")
    return world


@pytest.mark.parametrize("size_mb", SIZES_MB, ids=[f"{s}MB" for s in SIZES_MB])
def test_oneshot_quantized_allreduce(perf, device: str, size_mb: int) -> None:
    """One persistent kernel: on each rank, half the programs quantize and store its blocks into the peer's
    symmetric memory and raise a flag per wave; the other half wait for the peer's flags and sum both dequantized
    blocks in fp32 (no requantization)."""
    world = two_or_skip(device)
    numel = size_mb * 2**20 // 2
    result, measure = launch(perf, "perftests.support.nccl_cases:allreduce_case",
                             dict(numel=numel, variant="oneshot", config=ONESHOT_CONFIGS[size_mb]), world)
    assert_within_bound(result, "oneshot")
    assert result["ranks_identical"], "the two ranks' one-shot results differ: each must sum the same two values"
    perf.compare_samples(measure, name="oneshot_vs_nccl_bf16", world_size=world, bytes=numel * 2.0,
                         config=ONESHOT_CONFIGS[size_mb])


@pytest.mark.parametrize("config", oneshot_configs(), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_oneshot_quantized_allreduce_stress(device: str, config: dict[str, int]) -> None:
    """At each config the suite times: 1000 calls back to back on inputs that change every call, no synchronisation
    between them (a rank may run a call ahead, into the other slot), then 8 calls in a CUDA graph replayed 25 times:
    every output within the one-shot bound, both ranks' outputs the same bits, no wait spun out."""
    from speedgate.launch import run_ranks

    world = two_or_skip(device)
    result = run_ranks("perftests.support.nccl_cases:stress_case", world,
                       dict(numel=8 * 2**20, calls=1000, config=config), timeout_s=RANK_TIMEOUT_S)[0]
    assert not result["spun_out"], "a wait for the peer's flag spun out: a flag was never raised"
    assert result["max_error_over_bound"] <= 1.0, (
        f"an output's error is {result['max_error_over_bound']:.3f}x the one-shot bound in {result['calls']} calls")
    assert result["checksums_equal"], "the two ranks' outputs differ in some call"


ONESHOT_BUILD = """
import json, re
from perftests.kernels.oneshot_allreduce import MAX_SPINS, _oneshot_kernel
from perftests.kernels.quant import QBLOCK
from perftests.support.gluon_build import compile_to, ptxas_report
signature = {"x_ptr": "*bf16", "out_ptr": "*bf16", "peer_codes_ptr": "*i8", "peer_scales_ptr": "*fp32",
             "peer_flags_ptr": "*i32", "codes_ptr": "*i8", "scales_ptr": "*fp32", "flags_ptr": "*i32",
             "state_ptr": "*i32", "n_blocks": "i32", "SLOT_CODES": "i32", "SLOT_SCALES": "i32", "SENDERS": "i32"}
config, rank = ITEM
built = compile_to(_oneshot_kernel, signature, dict(RANK=rank, QBLOCK=QBLOCK, ROWS=config["rows"],
                   WAVES=config["waves"], MAX_SPINS=MAX_SPINS), config["warps"], 1, "ptx", aligned=tuple(signature))
ptx = built["ptx"]
print(json.dumps(dict(config=config, rank=rank, shared=built["shared"],
                      release=len(re.findall(r"atom[.]global[.]sys[.]release[.]", ptx)),
                      acquire=len(re.findall(r"(?:ld|atom)[.]global[.]sys[.]acquire[.]", ptx)), **ptxas_report(ptx))))
"""


def test_oneshot_kernel_builds_for_hopper() -> None:
    """The one-shot kernel (it has inline PTX, so no interpreter runs it) compiles for sm_90 on any machine, for
    both ranks, at every config the suite times: no spill, and registers and shared memory that let one program sit
    on every SM at once (the kernel's waits need every program resident); a sender's flags are released and a
    reducer's acquired at system scope (the peer's GPU sees them)."""
    found = gluon_build.build_each(ONESHOT_BUILD, [(config, rank) for config in oneshot_configs() for rank in (0, 1)])
    assert [(built["config"], built["rank"]) for built in found] == [
        (config, rank) for config in oneshot_configs() for rank in (0, 1)], found
    for built in found:
        config, where = built["config"], f"rank {built['rank']} at {built['config']}"
        threads = config["warps"] * 32
        assert built["spill_stores"] == 0, f"{where}: {built['spill_stores']} bytes spilled"
        assert built["registers"] * threads <= 65536, f"{where}: {built['registers']} registers a thread"
        assert built["shared"] <= 227 * 1024, f"{where}: {built['shared']} bytes of shared memory"
        assert built["release"] >= config["waves"] and built["acquire"] >= 1, built


def test_backward_allreduce_overlap(perf, device: str) -> None:
    world = world_or_skip(device)
    payload = dict(width=4096, layers=8, tokens=4096, bucket_mb=25)
    result, measure = launch(perf, "perftests.support.nccl_cases:overlap_case", payload, world)
    assert result["overlapped_equals_after"], "the overlapped all-reduce left different gradients than the one after backward"
    assert result["reduced"], "the gradients after the all-reduce equal this rank's own: nothing was reduced"
    perf.compare_samples(measure, name="overlapped_vs_after_backward", world_size=world,
                         bytes=float(result["gradient_bytes"]))


def test_quant_kernels(perf, hold_blessed, device: str) -> None:
    """The three Triton kernels against their eager references, on one device (the interpreter on the CPU)."""
    n = 96 * quant.QBLOCK if device == "cuda" else 6 * quant.QBLOCK  # chunks of n / 3 whole blocks
    world = 3
    x = (torch.randn(world, n, device=device) * torch.logspace(-3, 3, n // quant.QBLOCK, device=device).repeat_interleave(quant.QBLOCK)).to(torch.bfloat16)
    x[0, :quant.QBLOCK] = 0  # an all-zero block: scale 0, codes 0, no division by zero
    codes = torch.empty(world, n, dtype=torch.int8, device=device)
    scales = torch.empty(world, n // quant.QBLOCK, device=device)
    for w in range(world):
        quant.quantize(x[w], codes[w], scales[w])
        ref_codes, ref_scales = quant.quantize_eager(x[w])
        perf.assert_close(scales[w], ref_scales, rtol=1e-6, atol=0.0)
        # The kernel's reciprocal may round differently from eager's at a half-way point: at most one code apart.
        assert int((codes[w].int() - ref_codes.int()).abs().max()) <= 1
        # The quantization error bound: half a scale per element.
        err = (quant.dequantize(codes[w], scales[w], dtype=torch.float32) - x[w].float()).abs().reshape(-1, quant.QBLOCK)
        assert bool((err <= scales[w][:, None] * (0.5 + 1e-5)).all()), "quantization error above half a scale"
    red_codes, red_scales = quant.reduce_requantize(codes, scales)
    exact = (codes.float().reshape(world, -1, quant.QBLOCK) * scales[:, :, None]).sum(dim=0)
    ref_red_codes, ref_red_scales = quant.reduce_requantize_eager(codes, scales)
    perf.assert_close(red_scales, ref_red_scales, rtol=1e-6, atol=0.0)
    assert int((red_codes.int() - ref_red_codes.int()).abs().max()) <= 1
    back = quant.dequantize(red_codes, red_scales, dtype=torch.float32).reshape(-1, quant.QBLOCK)
    assert bool(((back - exact).abs() <= red_scales[:, None] * (0.5 + 1e-5) + 1e-6 * exact.abs()).all())
    bf16 = quant.dequantize(red_codes, red_scales)
    # One bf16 unit: the interpreter's fp32 -> bf16 conversion does not round to nearest even.
    perf.assert_close(bf16, quant.dequantize_eager(red_codes, red_scales), rtol=2.0**-7, atol=0.0)
    # The packed layout (each segment [codes | scales], what the all-reduce sends) holds the same values.
    send = quant.Packed(n // world, world, device)
    quant.quantize(x[0], packed=send)
    packed_codes, packed_scales = send.unpack()
    unpacked_codes, unpacked_scales = quant.quantize(x[0])
    assert torch.equal(packed_codes.reshape(-1), unpacked_codes) and torch.equal(packed_scales.reshape(-1), unpacked_scales)
    perf.assert_close(quant.dequantize(packed=send), quant.dequantize(unpacked_codes, unpacked_scales), rtol=0.0, atol=0.0)
    recv = quant.Packed(n, world, device)  # world segments of one chunk each, as the all-to-all delivers them
    for w in range(world):
        seg_codes, seg_scales = recv.segment(w).unpack()
        seg_codes.copy_(codes[w].view(1, -1))
        recv.buffer.view(world, -1)[w, n:].view(torch.float32).copy_(scales[w])
    reduced = quant.Packed(n, 1, device)
    quant.reduce_requantize(packed=recv, out=reduced)
    got_codes, got_scales = reduced.unpack()
    assert torch.equal(got_codes.reshape(-1), red_codes) and torch.equal(got_scales.reshape(-1), red_scales)
    # own=(w, segment): contribution w is read from its own buffer (the P2P form skips copying it); the copy in
    # recv is spoiled to prove it is not read.
    own = quant.Packed(n, 1, device)
    own.buffer.copy_(recv.segment(1).buffer)
    recv.segment(1).buffer.fill_(77)
    again = quant.Packed(n, 1, device)
    quant.reduce_requantize(packed=recv, out=again, own=(1, own))
    assert torch.equal(again.buffer, reduced.buffer)
    gathered = quant.Packed(n // world, world, device)
    gathered.buffer.copy_(send.buffer)
    own_segment = quant.Packed(n // world, 1, device)
    own_segment.buffer.copy_(send.segment(2).buffer)
    gathered.segment(2).buffer.fill_(77)
    perf.assert_close(quant.dequantize(packed=gathered, own=(2, own_segment)), quant.dequantize(packed=send), rtol=0.0, atol=0.0)
    if device == "cuda" and not INTERPRETING:
        # The kernels' cost at the all-reduce's size (256 MB of bf16, two ranks' chunks for the reduction), each
        # against its eager reference, with the bytes each must move (the floor is bytes over copy bandwidth).
        time_at_allreduce_size(perf, hold_blessed, device, 128 * 2**20)


def time_at_allreduce_size(perf, hold_blessed, device: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """The three kernels on n bf16 values, each side on rotating input sets (inputs=): every call reads data it has
    not read before. The kernels write into preallocated buffers, as the all-reduce's do; unchecked here (checked
    above at a small size, against the same eager references)."""
    def values(seed: int) -> tuple[torch.Tensor]:
        return (torch.randn(n, device=device, generator=generator(device, seed)).to(torch.bfloat16),)

    def codes(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return quant.quantize(*values(seed))

    def pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:  # two ranks' contributions to one chunk
        q, s = codes(seed)
        return q.view(2, -1), s.view(2, -1)

    q8 = torch.empty(n, dtype=torch.int8, device=device)
    s8 = torch.empty(n // quant.QBLOCK, device=device)
    out16 = torch.empty(n, dtype=torch.bfloat16, device=device)
    red_q = torch.empty(n // 2, dtype=torch.int8, device=device)
    red_s = torch.empty(n // 2 // quant.QBLOCK, device=device)
    scale_bytes = s8.numel() * 4.0
    for kernel, name in ((quant._quantize_kernel, "quantize_vs_eager"), (quant._dequantize_kernel, "dequantize_vs_eager"),
                         (quant._reduce_requantize_kernel, "reduce_requantize_vs_eager")):
        hold_blessed(kernel, name)
    # Each kernel autotuned at this size (or held to its blessed config) before its config is read.
    quant.quantize(*values(0), q8, s8)
    quant.reduce_requantize(q8.view(2, -1), s8.view(2, -1), red_q, red_s)
    quant.dequantize(q8, s8, out16)
    perf.compare(quant.quantize_eager, lambda x: quant.quantize(x, q8, s8), inputs=values, name="quantize_vs_eager",
                 check=False, bytes=n * 3.0 + scale_bytes, config=best_config(quant._quantize_kernel))
    perf.compare(quant.reduce_requantize_eager, lambda c, s: quant.reduce_requantize(c, s, red_q, red_s), inputs=pair,
                 name="reduce_requantize_vs_eager", check=False, bytes=n * 1.5 + scale_bytes * 1.5,
                 config=best_config(quant._reduce_requantize_kernel))
    perf.compare(quant.dequantize_eager, lambda c, s: quant.dequantize(c, s, out16), inputs=codes, name="dequantize_vs_eager",
                 check=False, bytes=n * 3.0 + scale_bytes, config=best_config(quant._dequantize_kernel))
