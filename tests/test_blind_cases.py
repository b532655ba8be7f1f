"""No blind cases: SM cycles for heavy tensor-core-bound pairs, the codegen facts of each side's kernels (a changed
pick its own verdict, a compiler upgrade's change a strict failure), and a comparison that stays undecided ending
'inconclusive' rather than passing. CPU only: recorded stamps, profiler traces and compiled-kernel metadata."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from conftest import ONE_COMPARISON, write_entries
from speedgate import codegen, evidence, judging
from speedgate.baseline import BaselineError, read, validate
from speedgate.measure import SUSTAINED_PAIR_MS, Measurement, measurement_from_samples
from speedgate.timers.cuda import IdleStart
from speedgate.timers.cycles import CYCLES_MIN_PEAK, CYCLES_TIMER, counts_cycles
from speedgate.verdict import Verdict, fails

# -- SM cycles -----------------------------------------------------------------------------------------------------


def test_cycles_are_matched_by_sm_and_a_program_seen_once_is_left_out() -> None:
    torch = pytest.importorskip("torch")
    from speedgate.timers.cycles import cycles_of

    # Call 0: four programs on SMs 0-3 in both stamps, 1000 cycles in 500 ns. Call 1: SM 0 ran two programs of the
    # first stamp and SM 5 one of the second only; each SM's clock starts elsewhere (clocks of SMs need not agree).
    first = [[[s, 100 + 7 * s, 0] for s in range(4)], [[s, 1100 + 7 * s, 500] for s in (3, 2, 1, 0)]]
    second = [[[s, 10 + 1000 * s, 0] for s in (0, 0, 1, 2)], [[s, 2010 + 1000 * s, 1000] for s in (0, 1, 2, 5)]]
    stamps = torch.tensor([first, second], dtype=torch.int64)
    cycles, mhz = cycles_of(stamps, torch)
    assert cycles == [1000.0, 2000.0]
    assert mhz == [2000.0, 2000.0]


def warm(reference_ms: float, optimized_ms: float, calls: int = 4) -> list[float]:
    return [reference_ms, optimized_ms] * calls


@pytest.mark.parametrize(("reference_ms", "optimized_ms", "floor_ms", "counted"), [
    (0.75, 1.1, 0.6, True),   # an fp8 matmul against _scaled_mm: both sides near the ceiling, a heavy pair
    (40.0, 0.9, 0.6, False),  # an eager attention reference: memory-bound, its time does not scale with the clock
    (0.3, 0.4, 0.25, False),  # a light pair: no sustained load, no power cap to see through
    (0.75, 1.1, None, False),  # no declared compute-bound work
])
def test_a_pair_is_counted_in_cycles_only_when_both_sides_are_tensor_core_bound_and_heavy(
        reference_ms: float, optimized_ms: float, floor_ms: float | None, counted: bool) -> None:
    assert counts_cycles(warm(reference_ms, optimized_ms), floor_ms, SUSTAINED_PAIR_MS) is counted
    if counted:
        assert reference_ms + optimized_ms >= SUSTAINED_PAIR_MS
        assert floor_ms is not None and floor_ms / max(reference_ms, optimized_ms) >= CYCLES_MIN_PEAK


# -- codegen facts -------------------------------------------------------------------------------------------------

PTX = """
.version 8.7
.target sm_90a
// a comment: ld.global.b32 is not counted here
.visible .entry _k(
)
{
	.reg .b32 %r<5>;
$L__BB0_1:
	ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
	@%p1 st.global.b32 [ %rd2 + 0 ], %r1;
	wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd3, %rd4, 1, 1, 1, 0, 1;
	cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd5, {%r2, %r3}], [%r4];
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r2;
	bar.sync 0;
	st.local.b32 [%rd6], %r1;
	ret;
}
"""


def test_the_ptx_mix_counts_instructions_by_class_and_skips_comments_labels_and_directives() -> None:
    mix = codegen.ptx_mix(PTX)
    assert mix == {"barrier": 2, "ld_global": 1, "mma": 1, "st_global": 1, "st_local": 1, "tma": 1, "total": 8}


def trace_event(name: str, stream: int, **args: Any) -> tuple[str, int, str]:
    return name, stream, json.dumps({"stream": stream, **args})


def test_trace_kernels_keep_each_kernel_once_in_launch_order_without_the_flush_stream() -> None:
    events = [
        trace_event("spin", 13),  # the hold and the flush, on the flush stream
        trace_event("_matmul_kernel", 7, grid=[132, 1, 1], block=[256, 1, 1], **{"registers per thread": 168,
                                                                                 "shared memory": 147456}),
        trace_event("fill", 13),
        trace_event("_matmul_kernel", 7, grid=[132, 1, 1], block=[256, 1, 1], **{"registers per thread": 168}),
        trace_event("_matmul_kernel", 7, grid=[64, 1, 1], block=[256, 1, 1]),  # another variant of one source
    ]
    kernels = codegen.trace_kernels(events, skip_stream=13)
    assert [k["name"] for k in kernels] == ["_matmul_kernel", "_matmul_kernel"]
    assert kernels[0] == {"name": "_matmul_kernel", "grid": [132, 1, 1], "block": [256, 1, 1], "registers": 168,
                          "shared_bytes": 147456}
    assert codegen.trace_kernels([("k", 7, "")]) == [{"name": "k"}]  # a torch that leaves the metadata empty


def compiled(name: str, regs: int, spills: int, ptx: str = PTX) -> Any:
    meta = types.SimpleNamespace(name=name, shared=1024, num_warps=8, num_stages=3)
    return types.SimpleNamespace(name=name, n_regs=regs, n_spills=spills, metadata=meta, asm={"ptx": ptx})


def test_a_side_merges_triton_facts_into_the_trace_and_numbers_a_second_variant_of_one_name() -> None:
    traced = [{"name": "_k", "grid": [132, 1, 1]}, {"name": "_k", "grid": [64, 1, 1]}, {"name": "nvjet_gemm"}]
    own = [codegen.compiled_facts(compiled("_k", 168, 0)), codegen.compiled_facts(compiled("_k", 182, 4))]
    facts = codegen.side_facts(traced, own)
    assert [k["name"] for k in facts] == ["_k", "_k#2", "nvjet_gemm"]
    assert facts[0]["registers"] == 168 and facts[0]["spills"] == 0 and facts[0]["grid"] == [132, 1, 1]
    assert facts[1]["registers"] == 182 and facts[1]["spills"] == 4 and facts[1]["stages"] == 3
    assert facts[0]["ptx"]["mma"] == 1


RESOURCE_USAGE = """
Resource usage:
 Common:
  GLOBAL:0
 Function kernel_cutlass_gemm_0:
  REG:168 STACK:0 SHARED:1024 LOCAL:96 CONSTANT[0]:977 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function other_kernel:
  REG:40 STACK:16 SHARED:0 LOCAL:0 CONSTANT[0]:400 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_cuobjdumps_resource_usage_gives_each_functions_registers_and_spills_in_words() -> None:
    assert codegen.parse_resource_usage(RESOURCE_USAGE) == {
        "kernel_cutlass_gemm_0": {"registers": 168, "spills": 24}, "other_kernel": {"registers": 40, "spills": 0}}
    assert codegen.parse_resource_usage("") == {}


def cute_compiled(name: str, ptx: str | None = PTX, cubin: bytes | None = b"cubin") -> Any:
    """A stand-in of a CuTe DSL compiled function: kernel_info by kernel name, the PTX and cubin it kept."""
    return types.SimpleNamespace(kernel_info={name: {}}, function_name="cutlass___call___gemm",
                                 artifacts=types.SimpleNamespace(PTX=ptx, CUBIN=cubin))


def test_a_cutlass_kernels_facts_come_from_the_ptx_and_cubin_its_compile_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codegen, "_run_cuobjdump", lambda cubin: RESOURCE_USAGE)
    codegen._resource_usage_text.cache_clear()
    facts = codegen.compiled_facts(cute_compiled("kernel_cutlass_gemm_0"))
    assert facts == {"name": "kernel_cutlass_gemm_0", "ptx": codegen.ptx_mix(PTX), "registers": 168, "spills": 24}
    # Merged into the trace's kernel of that name: the profiler's launch facts first, the cubin's beside them.
    traced = [{"name": "kernel_cutlass_gemm_0", "grid": [2, 1, 66], "registers": 168, "shared_bytes": 230400}]
    [merged] = codegen.side_facts(traced, [facts])
    assert merged["spills"] == 24 and merged["grid"] == [2, 1, 66] and merged["ptx"]["mma"] == 1
    # Compiled without keeping them: the name alone, nothing invented.
    codegen._resource_usage_text.cache_clear()
    assert codegen.compiled_facts(cute_compiled("kernel_cutlass_gemm_0", ptx=None, cubin=None)) == {
        "name": "kernel_cutlass_gemm_0"}


def test_cutlass_compiled_functions_called_inside_are_noted_once_and_the_class_given_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """compiled_launches notes every CuTe DSL compiled function called inside (a subclass's own __call__ that calls
    its base's too), once each, and leaves the classes as they were."""
    import sys

    class JitCompiledFunction:
        def __call__(self, *args: Any) -> str:
            return "base"

    class CudaFunction(JitCompiledFunction):
        def __call__(self, *args: Any) -> str:
            return "cuda+" + super().__call__(*args)

    monkeypatch.setitem(sys.modules, "cutlass.base_dsl.jit_executor",
                        types.SimpleNamespace(JitCompiledFunction=JitCompiledFunction))
    calls = CudaFunction.__dict__["__call__"], JitCompiledFunction.__dict__["__call__"]
    first, second = CudaFunction(), CudaFunction()
    with codegen.compiled_launches() as launched:
        assert CudaFunction.__dict__["__call__"] is not calls[0]  # hooked inside
        assert first(1) == "cuda+base" and first(2) == "cuda+base" and second() == "cuda+base"
    assert launched == [first, second]
    assert (CudaFunction.__dict__["__call__"], JitCompiledFunction.__dict__["__call__"]) == calls
    with codegen.compiled_launches() as launched_again:
        pass
    assert launched_again == []


def autotuner(name: str, configs: int = 1, ptx: str | None = PTX) -> Any:
    """A stand-in of inductor's CachingAutotuner: its kernel's JIT function, its meta, and one launcher per config
    (one left once it has chosen), each with what inductor sets on a launcher."""
    launchers = [types.SimpleNamespace(config=types.SimpleNamespace(num_warps=4 * (i + 1), num_stages=1), n_regs=40 + i,
                                       n_spills=i, shared=64, bin=types.SimpleNamespace(asm={"ptx": ptx}))
                 for i in range(configs)]
    return types.SimpleNamespace(fn=types.SimpleNamespace(__name__=name), inductor_meta={"kernel_name": name},
                                 launchers=launchers)


def test_a_torch_compile_kernels_facts_are_the_launcher_its_autotuner_chose() -> None:
    facts = codegen.compiled_facts(autotuner("triton_red_fused_layer_norm_0"))
    assert facts == {"name": "triton_red_fused_layer_norm_0", "registers": 40, "spills": 0, "shared_bytes": 64,
                     "warps": 4, "stages": 1, "ptx": codegen.ptx_mix(PTX)}
    # Not yet chosen: the name alone, no candidate's facts taken for the kernel's.
    assert codegen.compiled_facts(autotuner("triton_poi_fused_gelu_1", configs=2)) == {"name": "triton_poi_fused_gelu_1"}
    # A launcher that kept no compiled kernel: the PTX of its config's compile result (a user's kernel inside a
    # compiled graph), never another config's; none kept (the static CUDA launcher): no PTX, nothing invented.
    tuner = autotuner("_rms_norm_kernel")
    del tuner.launchers[0].bin
    assert "ptx" not in codegen.compiled_facts(tuner) and codegen.compiled_facts(tuner)["spills"] == 0
    other = types.SimpleNamespace(config=types.SimpleNamespace(), kernel=types.SimpleNamespace(asm={"ptx": "mma.x;"}))
    own = types.SimpleNamespace(config=tuner.launchers[0].config, kernel=types.SimpleNamespace(asm={"ptx": PTX}))
    tuner.compile_results = [other]
    assert "ptx" not in codegen.compiled_facts(tuner)
    tuner.compile_results = [other, own]
    assert codegen.compiled_facts(tuner)["ptx"] == codegen.ptx_mix(PTX)
    # Merged into the trace's kernel of that name: the profiler's launch facts stay, the launcher's join them.
    traced = [{"name": "triton_red_fused_layer_norm_0", "grid": [2048, 1, 1], "registers": 38, "shared_bytes": 32}]
    [merged] = codegen.side_facts(traced, [facts])
    assert merged["registers"] == 38 and merged["shared_bytes"] == 32 and merged["spills"] == 0
    assert merged["warps"] == 4 and merged["ptx"]["mma"] == 1


def test_a_compiled_kernel_the_trace_does_not_name_is_left_out_but_listed_where_nothing_was_traced() -> None:
    """Two compiled graphs each have a triton_poi_fused_add_0; launched with one shape, the trace holds one kernel
    of that name. The second graph's facts must not become a kernel beside the trace's (a change every run)."""
    own = [codegen.compiled_facts(autotuner("triton_poi_fused_add_0")),
           codegen.compiled_facts(autotuner("triton_poi_fused_add_0"))]
    traced = [{"name": "triton_poi_fused_add_0", "grid": [64, 1, 1]}, {"name": "nvjet_gemm"}]
    assert [k["name"] for k in codegen.side_facts(traced, own)] == ["triton_poi_fused_add_0", "nvjet_gemm"]
    assert [k["name"] for k in codegen.side_facts([], own)] == ["triton_poi_fused_add_0", "triton_poi_fused_add_0#2"]


def test_one_compiled_kernel_launched_at_several_grids_gives_each_launch_its_facts() -> None:
    """A dynamic-shape graph's kernel runs at every length of the schedule: the trace has it at four grids ('k',
    'k#2', ...), the compile once. Each launch holds its registers and spills (else a change of the kernel shows on the
    first launch only). A name with two compiled variants (two static graphs) gives each only to its own number."""
    one = [{"name": "triton_poi_fused_gelu_2", "registers": 19, "spills": 3}]
    traced = [{"name": "triton_poi_fused_gelu_2", "grid": [g, 1, 1]} for g in (1024, 2048, 3072)]
    merged = codegen.side_facts(traced, one)
    assert [k["name"] for k in merged] == ["triton_poi_fused_gelu_2", "triton_poi_fused_gelu_2#2",
                                           "triton_poi_fused_gelu_2#3"]
    assert [k.get("spills") for k in merged] == [3, 3, 3] and [k["grid"][0] for k in merged] == [1024, 2048, 3072]
    two = [{"name": "triton_poi_fused_gelu_2", "spills": spills} for spills in (1, 2)]
    assert [k.get("spills") for k in codegen.side_facts(traced, two)] == [1, 2, None]


def test_a_side_replaying_its_own_graphs_takes_its_kernels_facts_from_its_first_calls() -> None:
    """max-autotune's and reduce-overhead's compiled model replays cudagraph trees: its profiled calls launch nothing
    through inductor's autotuners, and 31 of the H100 file's kernels of test_compile_mode kept the trace's facts alone,
    no spills. The first calls ran those autotuners: their facts join the side's, never a @triton.autotune kernel's
    candidates from a first call's race, and never a second copy of a kernel the profiled calls launched."""
    norm, gelu = autotuner("triton_per_fused_layer_norm_9"), autotuner("triton_poi_fused_gelu_2")
    candidate = types.SimpleNamespace(name="_matmul_kernel", n_regs=90, n_spills=0, metadata=None)  # a race's loser
    facts = codegen.compiled_facts
    assert codegen.with_first_calls([], [norm, candidate, gelu, norm]) == [facts(norm), facts(gelu)]
    traced = [{"name": "triton_per_fused_layer_norm_9", "grid": [8192, 1, 1], "registers": 64}]
    [merged] = codegen.side_facts(traced, codegen.with_first_calls([], [norm, candidate, gelu]))
    assert merged["spills"] == 0 and merged["registers"] == 64 and merged["warps"] == 4
    # Launched in the profiled calls too (the same autotuner, or another of that name): the profiled calls' own.
    own = autotuner("triton_per_fused_layer_norm_9")
    own.launchers[0].n_spills = 7
    assert codegen.with_first_calls([facts(norm)], [norm, gelu]) == [facts(norm), facts(gelu)]
    assert codegen.with_first_calls([facts(own)], [norm]) == [facts(own)]
    assert codegen.with_first_calls([], []) == []


def test_torch_compile_autotuners_that_ran_are_noted_once_and_their_classes_given_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """compiled_launches notes each autotuner whose run launched a kernel inside (a subclass's own run too, as
    inductor's DebugAutotuner has), once; the facts are read after the calls, so they are the launcher it chose."""
    import sys

    class CachingAutotuner:
        def __init__(self, tuner: Any) -> None:
            self.__dict__.update(vars(tuner))

        def run(self, *args: Any, stream: int, **kwargs: Any) -> str:
            del self.launchers[1:]  # the first call races the configs and keeps the best
            return f"ran on {stream}"

    class DebugAutotuner(CachingAutotuner):
        def run(self, *args: Any, stream: int, **kwargs: Any) -> str:
            return "debug " + super().run(*args, stream=stream, **kwargs)

    monkeypatch.setitem(sys.modules, "torch._inductor.runtime.triton_heuristics",
                        types.SimpleNamespace(CachingAutotuner=CachingAutotuner))
    methods = CachingAutotuner.__dict__["run"], DebugAutotuner.__dict__["run"]
    norm, gelu = CachingAutotuner(autotuner("triton_red_fused_0", configs=3)), DebugAutotuner(autotuner("triton_poi_1"))
    with codegen.compiled_launches() as launched:
        assert norm.run(1, stream=7) == "ran on 7" and norm.run(2, stream=7) == "ran on 7"
        assert gelu.run(stream=0) == "debug ran on 0"
    assert launched == [norm, gelu]
    assert (CachingAutotuner.__dict__["run"], DebugAutotuner.__dict__["run"]) == methods
    assert [codegen.compiled_facts(k)["registers"] for k in launched] == [40, 40]
    with codegen.compiled_launches() as launched_again:
        norm.run(stream=7)
    assert launched_again == [norm]


def sides(optimized: list[dict[str, Any]], reference: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"reference": reference or [{"name": "nvjet_gemm", "grid": [66, 2, 1]}], "optimized": optimized}


def test_a_compiler_that_doubles_spills_is_named() -> None:
    blessed = sides([{"name": "_k", "registers": 168, "spills": 0, "ptx": {"ld_local": 0, "total": 900}}])
    now = sides([{"name": "_k", "registers": 255, "spills": 24, "ptx": {"ld_local": 12, "total": 930}}])
    said = codegen.changes(blessed, now)
    assert "optimized _k: registers 168 -> 255" in said
    assert "optimized _k: spills 0 -> 24" in said
    assert "optimized _k: PTX ld_local 0 -> 12, total 900 -> 930" in said
    assert codegen.changes(blessed, blessed) == []
    assert codegen.changes(None, now) == [] and codegen.changes(blessed, {}) == []


def test_another_pick_is_a_replaced_kernel_or_another_config_of_the_references_but_not_an_added_kernel() -> None:
    blessed = sides([{"name": "_k", "grid": [132, 1, 1], "registers": 168}])
    replaced = sides([{"name": "triton_tem_mm", "grid": [132, 1, 1]}])
    reconfigured = sides([{"name": "_k", "grid": [264, 1, 1], "registers": 168}])
    added = sides([{"name": "spin_kernel"}, {"name": "_k", "grid": [132, 1, 1], "registers": 168}])
    assert codegen.repicked_sides(blessed, replaced) == ["optimized"]
    # The optimized kernel itself recompiled otherwise: what an edit of it does too, so no pick (a regression stays).
    assert codegen.repicked_sides(blessed, reconfigured) == []
    reference = sides([{"name": "_k", "grid": [132, 1, 1], "registers": 168}],
                      reference=[{"name": "nvjet_gemm", "grid": [66, 2, 1], "registers": 90}])
    assert codegen.repicked_sides(reference, sides(reference["optimized"], reference=[
        {"name": "nvjet_gemm", "grid": [132, 1, 1], "registers": 90}])) == ["reference"]
    assert codegen.repicked_sides(blessed, added) == []  # new work beside the blessed kernel: a slowdown, no pick
    assert "optimized side launches more kernels than blessed: +spin_kernel" in codegen.changes(blessed, added)
    assert "optimized side launches other kernels (another pick): +triton_tem_mm; -_k" in codegen.changes(blessed, replaced)
    assert "optimized side launches fewer kernels than blessed: -spin_kernel" in codegen.changes(added, blessed)
    library = sides([{"name": "_k", "grid": [132, 1, 1], "registers": 168}], reference=[{"name": "nvjet_other"}])
    assert codegen.repicked_sides(blessed, library) == ["reference"]


def test_facts_recorded_with_duplicate_names_compare_by_launch_order() -> None:
    blessed = sides([{"name": "_k", "registers": 173}, {"name": "_k", "registers": 182}])
    now = sides([{"name": "_k", "registers": 173}, {"name": "_k#2", "registers": 182}])
    assert codegen.changes(blessed, now) == [] and codegen.repicked_sides(blessed, now) == []


def test_the_baseline_schema_takes_codegen_facts_and_refuses_malformed_ones() -> None:
    doc = {"schema_version": 1, "hardware_key": "test-box", "fingerprint": {"hardware": {"kind": "gpu", "name": "x"},
                                                                           "software": {}},
           "cases": {"t.py::test": {**ENTRY, "codegen": sides([{"name": "_k", "registers": 168, "ptx": {"mma": 12}}])}}}
    validate(doc, "t.json")
    doc["cases"]["t.py::test"]["codegen"]["optimized"][0]["registers"] = -1
    with pytest.raises(BaselineError):
        validate(doc, "t.json")


def test_the_baseline_schema_refuses_a_malformed_other_pick_naming_where(tmp_path: Path) -> None:
    kernels = sides([{"name": "_k", "registers": 168}])
    pick = {"speedup": 2.1, "reference_ms": 2.1, "optimized_ms": 1.0, "tolerance": 0.02, "measured_at": "now",
            "codegen": sides([{"name": "_k", "registers": 170}])}
    doc = {"schema_version": 1, "hardware_key": "test-box", "fingerprint": {"hardware": {"kind": "gpu", "name": "x"},
                                                                           "software": {}},
           "cases": {"t.py::test": {**ENTRY, "codegen": kernels, "picks": [pick]}}}
    validate(doc, "t.json")
    del doc["cases"]["t.py::test"]["picks"][0]["speedup"]
    with pytest.raises(BaselineError, match=r"t.json: does not match the baseline schema at cases/t.py::test/picks/0"):
        validate(doc, "t.json")
    doc["cases"]["t.py::test"]["picks"][0]["speedup"] = float("nan")
    with pytest.raises(BaselineError, match="picks"):
        validate(doc, "t.json")
    # A file with a malformed pick is refused when read, and a gate run says which file and where.
    path = tmp_path / "test-box.json"
    path.write_text(json.dumps({**doc, "cases": {"t.py::test": {**ENTRY, "codegen": kernels, "picks": [{"speedup": 2}]}}}))
    with pytest.raises(BaselineError, match="test-box.json: does not match the baseline schema at cases/t.py::test/picks/0"):
        read(path)


# -- judging --------------------------------------------------------------------------------------------------------

ENTRY = {"speedup": 2.0, "reference_ms": 2.0, "optimized_ms": 1.0, "ci_low": 1.98, "ci_high": 2.02, "noise": 0.01,
         "rounds": 40, "timer": "scripted", "measured_at": "2026-11-26T00:00:00Z",
         "software": {"torch": "2.11.0", "triton": "3.6.0"}, "tolerance": 0.05}
SOFTWARE = {"torch": "2.11.0", "triton": "3.6.0"}


def measured(speedup: float, spread: float = 0.002, timer: str = "scripted", rounds: int = 40,
             reference_ms: float = 2.0) -> Measurement:
    """A measurement whose optimized side takes 1/speedup of the reference's time (2 ms unless said), with a little
    paired noise."""
    ref = [reference_ms * (1 + spread * ((i % 5) - 2)) for i in range(rounds)]
    opt = [reference_ms / speedup * (1 + spread * (((i * 3) % 5) - 2)) for i in range(rounds)]
    return measurement_from_samples(ref, opt, reference_first_ms=None, optimized_first_ms=None, seconds=1.0,
                                    stopped_by="converged", timer=timer)


def judged(first: Measurement, *again: Measurement, entry: dict[str, Any] | None = None,
           codegen_now: dict[str, Any] | None = None, software: dict[str, Any] | None = None,
           remeasure: bool = True, tolerance: float = 0.05, graphed: bool = False,
           host: dict[str, Any] | None = None) -> tuple[Any, int]:
    queue = list(again)
    taken = []

    def next_measurement() -> Measurement:
        taken.append(1)
        return queue.pop(0)

    fields = {"case_id": "t.py::test", "nodeid": "t.py::test", "name": None, "hardware_key": "test-box",
              "tolerance": tolerance, "codegen": codegen_now, **(host or {})}
    result, _, _ = judging.judge_measurement(
        first, next_measurement, fields, entry=ENTRY if entry is None else entry, file_found=True, remeasure=remeasure,
        graphed=graphed, throttled={}, roofline=lambda m: {}, closeness=[], software=software or SOFTWARE)
    return result, len(taken)


def test_a_clear_pass_is_measured_once() -> None:
    result, again = judged(measured(2.0))
    assert result.verdict == Verdict.PASS and again == 0


def test_a_regression_seen_twice_stands() -> None:
    result, again = judged(measured(1.6), measured(1.62))
    assert result.verdict == Verdict.REGRESSED and again == 1 and result.remeasured


def test_a_regression_a_clean_remeasure_clears_passes_saying_so() -> None:
    result, again = judged(measured(1.6), measured(1.99))
    assert result.verdict == Verdict.PASS and again == 1
    assert "measured 2 times: 1.600x under the floor, 1.990x pass" in result.note


def test_each_measurement_says_how_much_of_it_the_power_cap_held_the_clocks() -> None:
    """The training step on a card that ran capped (H200, 2026-11-29): three measurements read 1.497x, 1.477x and
    1.336x in one process; which of them the power cap held down is what tells the card's state from the code's."""
    from dataclasses import replace

    result, _ = judged(replace(measured(1.6), power_capped=0.12), replace(measured(1.62), power_capped=0.8))
    assert result.verdict == Verdict.REGRESSED
    assert ("measured 2 times: 1.600x under the floor (power-capped 12% of it), "
            "1.620x under the floor (power-capped 80% of it)") in result.note
    unwatched, _ = judged(measured(1.6), measured(1.62))  # no monitor (the CPU, a GPU without NVML): nothing said
    assert "power-capped" not in unwatched.note


CAPPED_CONFTEST = """
import pytest
from speedgate.plugin import SESSION_KEY
from speedgate.testing import ScriptedTimer

class CappedMonitor:
    # NVML's violation counters as a card at its power cap shows them: a second more of capped time at every read
    def __init__(self):
        self.ns = 0
    def violations(self):
        self.ns += 10**9
        return {"power": self.ns}
    def read(self):  # the GPU's state, read only to wait for heat to pass: there is no heat here
        raise AssertionError("a card at its power cap, not hot: nothing to cool")

@pytest.fixture
def speedgate_timer(request):
    request.config.stash[SESSION_KEY].bench.monitor = CappedMonitor()
    return ScriptedTimer({"reference": 2.0, "optimized": 1.25})
"""


def test_a_re_measured_case_reads_the_power_cap_of_each_measurement_from_the_gpu_monitor(
        pytester: pytest.Pytester) -> None:
    """The pipeline counts each measurement's capped time itself (NVML's counters before and after it), the first
    and every re-measurement alike, so a regression's note lists them."""
    from speedgate.hardware import detect

    pytester.makeconftest(CAPPED_CONFTEST)
    pytester.makepyfile(test_cases=ONE_COMPARISON)
    pytester.makeini("[pytest]\n")
    write_entries(pytester.path, {"test_cases.py::test_gemm": ENTRY}, detect("test-box").software)
    result = pytester.runpytest("--hardware-key", "test-box", "--speedgate-json", "run.json")
    result.assert_outcomes(failed=1)
    case = json.loads((pytester.path / "run.json").read_text())["cases"][0]
    assert case["verdict"] == "regressed" and case["remeasured"]
    assert "1.600x under the floor (power-capped 100% of it), 1.600x under the floor (power-capped 100% of it)" in case["note"]


def test_a_noisy_remeasure_no_longer_clears_a_regression() -> None:
    """The busy CPU box: the first measurement said regressed, a noisier one straddled the floor (0.401x, CI
    0.308-1.338 against 0.9x once); it passed. Now it is measured a third time, and still undecided it fails."""
    noisy = measured(1.85, spread=0.12)
    assert noisy.estimate.ratio < 1.9 <= noisy.estimate.high  # straddles the floor 2.0 x 0.95
    result, again = judged(measured(1.0), noisy, measured(1.86, spread=0.12))
    assert result.verdict == Verdict.INCONCLUSIVE and again == 2
    assert fails(result.verdict, strict=False)
    assert "inconclusive: 3 measurements" in result.note and "re-run on a quiet machine" in result.note


def test_a_straddling_first_measurement_is_measured_again_and_a_second_regression_decides() -> None:
    straddling = measured(1.85, spread=0.12)
    result, again = judged(straddling, measured(1.6), measured(1.61))
    assert result.verdict == Verdict.REGRESSED and again == 2


def test_blessing_judges_once() -> None:
    result, again = judged(measured(1.85, spread=0.12), remeasure=False)
    assert again == 0 and result.verdict == Verdict.PASS


def test_an_entry_blessed_in_another_unit_is_not_judged_against() -> None:
    result, _ = judged(measured(1.5, timer=CYCLES_TIMER))
    assert result.verdict == Verdict.NEW
    assert "blessed in milliseconds (scripted), timed in SM cycles" in result.note


def test_an_entry_timed_with_its_host_work_is_not_judged_against_graph_replays() -> None:
    """A case moved from latency=True to graph=True (test_compile_regional): the blessed speedup counted the host's
    launches, the new one the device's work alone. Judged against it, the new one read 'improved' (docs/results/
    gate-study.md, section 8); it is another number, re-blessed, as a change of units is."""
    idle = {**ENTRY, "timer": IdleStart.name, "speedup": 1.4}
    result, again = judged(measured(2.0, timer="cuda-events-held"), entry=idle, graphed=True)
    assert result.verdict == Verdict.NEW and again == 0
    assert result.note.startswith("blessed from an idle device, its host work included (cuda-events-idle-start), "
                                  "timed as CUDA graph replays, the device's work alone (cuda-events-held): re-bless")
    back = {**ENTRY, "timer": "cuda-events-held", "graphed": True}
    assert judged(measured(1.4, timer=IdleStart.name), entry=back)[0].verdict == Verdict.NEW


def test_a_side_that_starts_to_synchronize_is_still_judged() -> None:
    """The idle start a side's own synchronize forces (a held comparison, not graphed) drops nothing: an optimized
    side that adds an .item() and work is caught as before."""
    held = {**ENTRY, "timer": "cuda-events-held"}
    result, _ = judged(measured(1.5, timer=IdleStart.name), measured(1.5, timer=IdleStart.name),
                       measured(1.5, timer=IdleStart.name), entry=held)
    assert result.verdict == Verdict.REGRESSED
    assert "re-bless with this timer" in result.note
    assert judging.timed_otherwise(held, IdleStart.name, graphed=False) == ""
    assert judging.timed_otherwise({**held, "graphed": True}, "cuda-events-held", graphed=False) == ""


def test_a_multi_rank_entry_timed_from_idle_is_not_judged_against_held_samples() -> None:
    """A two-GPU case that asked to be held (speedgate.distributed): its entry's speedup counted both hosts'
    launches and their skew, the new one the devices' work alone: another number, re-blessed. The way back, a held
    side that starts to synchronize and falls back to the idle start, is judged as before."""
    from speedgate.distributed import HELD_TIMER, IDLE_TIMER

    idle = {**ENTRY, "timer": IDLE_TIMER, "speedup": 1.1}
    result, again = judged(measured(1.5, timer=HELD_TIMER), entry=idle)
    assert result.verdict == Verdict.NEW and again == 0
    assert result.note.startswith(f"blessed from an idle device at every call, the hosts' launches and skew included "
                                  f"({IDLE_TIMER}), timed held, the devices' work alone ({HELD_TIMER}): re-bless")
    held = {**ENTRY, "timer": HELD_TIMER}
    assert judged(measured(1.5, timer=IDLE_TIMER), measured(1.5, timer=IDLE_TIMER), measured(1.5, timer=IDLE_TIMER),
                  entry=held)[0].verdict == Verdict.REGRESSED
    assert judging.timed_otherwise(held, IDLE_TIMER, graphed=False) == ""


def test_a_verdict_that_did_not_pass_says_when_the_host_was_busy() -> None:
    """A launch-bound pair whose sides both ran twice their blessed time in one xdist worker (the other worker busy):
    a regression or an inconclusive verdict says the host's load beside it; a pass, or a quiet host, says nothing."""
    busy = {"host_load": 12.0, "host_cores": 8}
    said = "the host's load average was 12.0 on 8 cores when it was measured"
    result, _ = judged(measured(1.5), measured(1.5), measured(1.5), host=busy)
    assert result.verdict == Verdict.REGRESSED and said in result.note
    straddling = [measured(1.89, spread=0.08), measured(1.89, spread=0.08), measured(1.89, spread=0.08)]
    result, _ = judged(*straddling, host=busy)
    assert result.verdict == Verdict.INCONCLUSIVE and said in result.note, result.note
    assert said not in judged(measured(2.0), host=busy)[0].note
    quiet = judged(measured(1.5), measured(1.5), measured(1.5), host={"host_load": 3.9, "host_cores": 8})[0]
    assert quiet.verdict == Verdict.REGRESSED and "load average" not in quiet.note
    assert "load average" not in judged(measured(1.5), measured(1.5), measured(1.5), host={"host_load": None,
                                                                                            "host_cores": 8})[0].note


def test_a_verdict_that_did_not_pass_says_when_the_device_caught_up_with_the_host() -> None:
    """Held batches in which the device caught up with the host's queueing (Timer.outrun): said beside a regression
    or an inconclusive verdict, whose times then hold the host's pace; a pass, or no such batch, says nothing."""
    import dataclasses

    def outran(m: Measurement, batches: int = 3) -> Measurement:
        return dataclasses.replace(m, held_batches=12, outrun_batches=batches)

    said = "the device caught up with the host in 3 of 12 held batches of rounds"
    result, _ = judged(outran(measured(1.5)), outran(measured(1.5)), outran(measured(1.5)))
    assert result.verdict == Verdict.REGRESSED and said in result.note
    assert said not in judged(outran(measured(2.0)))[0].note
    quiet = judged(outran(measured(1.5), 0), outran(measured(1.5), 0), outran(measured(1.5), 0))[0]
    assert quiet.verdict == Verdict.REGRESSED and "caught up" not in quiet.note
    assert "caught up" not in judged(measured(1.5), measured(1.5), measured(1.5))[0].note  # a clock that holds nothing
    assert quiet.held_batches == 12 and quiet.outrun_batches == 0


def test_a_verdict_that_did_not_pass_says_when_batches_were_cut_into_pieces() -> None:
    """Held batches cut into pieces, each behind its own hold (Timer.pieces): their calls followed a hold, not the call
    before, which moved the causal flash kernel's time on an H200; said beside a regression or an inconclusive
    verdict, never beside a pass, and kept in the result."""
    import dataclasses

    def cut(m: Measurement, batches: int = 5) -> Measurement:
        return dataclasses.replace(m, held_batches=12, outrun_batches=0, cut_batches=batches)

    said = "5 of 12 held batches of rounds were cut into pieces, each behind its own hold"
    result, _ = judged(cut(measured(1.5)), cut(measured(1.5)), cut(measured(1.5)))
    assert result.verdict == Verdict.REGRESSED and said in result.note and result.cut_batches == 5
    passed = judged(cut(measured(2.0)))[0]
    assert said not in passed.note and passed.cut_batches == 5
    whole = judged(cut(measured(1.5), 0), cut(measured(1.5), 0), cut(measured(1.5), 0))[0]
    assert whole.verdict == Verdict.REGRESSED and "pieces" not in whole.note


def test_a_drop_that_is_wholly_the_references_other_pick_is_pick_changed() -> None:
    """Inductor's GELU kernel at another block size: the compiled reference got faster, the optimized side ran its
    blessed kernel in its blessed time. Named, and red only under strict."""
    entry = {**ENTRY, "codegen": {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [256, 1, 1]}],
                                  "optimized": [{"name": "_k"}]}}
    now = {"reference": [{"name": "triton_poi_fused_gelu_1", "block": [128, 1, 1]}], "optimized": [{"name": "_k"}]}
    faster_reference = measured(1.6, reference_ms=1.6)  # the optimized side at its blessed 1.0 ms
    result, _ = judged(faster_reference, faster_reference, entry=entry, codegen_now=now)
    assert result.verdict == Verdict.PICK_CHANGED
    assert result.codegen_changes and not result.codegen_drift
    assert "the reference side ran other kernels than blessed" in result.note
    assert not fails(result.verdict, strict=False) and fails(result.verdict, strict=True)


def test_a_slowed_optimized_side_cannot_pass_as_the_references_other_pick() -> None:
    """The H100 study of 2026-11-27: inductor picked other launch shapes for the reference in the gate's process,
    and the host's state made both sides 25-30% faster than blessed; the optimized side, slowed by 5%, read
    pick-changed, which passed. The optimized side moved too, so the pick does not explain the drop: regressed."""
    entry = {**ENTRY, "codegen": {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [256, 1, 1]}],
                                  "optimized": [{"name": "_k"}]}}
    now = {"reference": [{"name": "triton_poi_fused_gelu_1", "block": [128, 1, 1]}], "optimized": [{"name": "_k"}]}
    slowed = measured(1.84, reference_ms=1.4)  # both sides faster than blessed, the speedup 8% down (5% tolerance)
    result, _ = judged(slowed, slowed, entry=entry, codegen_now=now)
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False)
    assert "the reference side ran other kernels than blessed" in result.note
    assert "but the optimized side's own time moved too (-23.9%): the pick does not explain the drop" in result.note


GELU_BLESSED = {**ENTRY, "codegen": {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [256, 1, 1]}],
                                     "optimized": [{"name": "_k"}]}}
GELU_NOW = {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [128, 1, 1]}], "optimized": [{"name": "_k"}]}


def test_a_reference_pick_that_moved_less_than_moved_but_the_whole_drop_is_pick_changed() -> None:
    """The H200 whole-suite study's clean run (2026-11-27): inductor's GELU kernel of the compiled reference at
    another block size made it 2.4% faster, the optimized side ran its blessed kernel 0.7% slower, and the speedup
    fell 3.1% under a 2% tolerance. That read regressed, a false alarm: the reference had moved less than MOVED, so
    its pick was not counted. With the reference at its blessed time the speedup is inside the band."""
    drop = measured(1.938, reference_ms=1.952)  # reference 2.0 -> 1.952 ms, optimized 1.0 -> 1.007 ms
    result, _ = judged(drop, drop, entry=GELU_BLESSED, codegen_now=GELU_NOW, tolerance=0.02)
    assert result.verdict == Verdict.PICK_CHANGED, result.note
    assert "at its blessed time the speedup reads 1.98" in result.note
    assert not fails(result.verdict, strict=False) and fails(result.verdict, strict=True)


def test_a_reference_that_repicked_without_moving_does_not_excuse_a_slower_optimized_side() -> None:
    """The hole that counting every pick would open: the reference repicked but took its blessed time, and the
    optimized side is 2.9% slower (within MOVED) under a 2% tolerance. Undoing the pick leaves the drop: regressed."""
    slowed = measured(1.9436, reference_ms=2.0)  # optimized 1.0 -> 1.029 ms
    result, _ = judged(slowed, slowed, entry=GELU_BLESSED, codegen_now=GELU_NOW, tolerance=0.02)
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False)
    assert ("the reference side ran other kernels than blessed, but at its blessed time the speedup would still "
            "read 1.94") in result.note


def test_a_reference_pick_does_not_excuse_a_drop_where_the_optimized_side_did_new_work() -> None:
    """The third H200 study (2026-11-27), graph_break_fix[branch_where] slowed by 5%: the compiled reference
    repicked and read 8% faster; the optimized side, launch-bound and timed from an idle device, read only 2.4% slower
    than blessed (the host's state was faster that run) beside the injected spin kernel. With the reference at its
    blessed time the speedup was inside the band, so the drop read pick-changed and passed. The spin is new work
    beside the blessed kernels: no pick explains the drop."""
    entry = {**ENTRY, "codegen": {"reference": [{"name": "triton_poi_fused_relu_0", "block": [128, 1, 1]}],
                                  "optimized": [{"name": "triton_poi_fused_where_2", "block": [256, 1, 1]}]}}
    now = {"reference": [{"name": "triton_poi_fused_relu_0", "block": [256, 1, 1]}],
           "optimized": [{"name": "spin_kernel(long)"}, {"name": "triton_poi_fused_where_2", "block": [128, 1, 1]}]}
    slowed = measured(1.8018, reference_ms=1.8444)  # reference 2.0 -> 1.844 ms (8% faster), optimized 1.0 -> 1.024 ms
    result, _ = judged(slowed, slowed, entry=entry, codegen_now=now, tolerance=0.025)
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False), result.note
    assert ("the reference side ran other kernels than blessed, but the optimized side did new work beside its "
            "blessed kernels (spin_kernel(long)): the pick does not explain the drop, regressed") in result.note
    # The same run without the extra kernel is the reference's pick, as before.
    plain = {**now, "optimized": now["optimized"][1:]}
    result, _ = judged(slowed, slowed, entry=entry, codegen_now=plain, tolerance=0.025)
    assert result.verdict == Verdict.PICK_CHANGED, result.note


def test_an_improvement_is_the_picks_only_when_undoing_the_pick_brings_it_back() -> None:
    slower_reference = measured(2.058, reference_ms=2.058)  # the reference's pick 2.9% slower, optimized as blessed
    result, _ = judged(slower_reference, entry=GELU_BLESSED, codegen_now=GELU_NOW, tolerance=0.02)
    assert result.verdict == Verdict.PICK_CHANGED, result.note
    faster_optimized = measured(2.16, reference_ms=2.0)  # the reference repicked at its blessed time
    result, _ = judged(faster_optimized, entry=GELU_BLESSED, codegen_now=GELU_NOW, tolerance=0.02)
    assert result.verdict == Verdict.IMPROVED
    assert "but at its blessed time the speedup would still read 2.16" in result.note


def test_a_slower_pick_of_the_optimized_side_is_a_regression_named_as_a_pick() -> None:
    entry = {**ENTRY, "codegen": sides([{"name": "_k", "grid": [132, 1, 1], "registers": 168}])}
    now = sides([{"name": "triton_tem_fused_mm_0", "grid": [132, 1, 1], "registers": 182}])
    result, _ = judged(measured(1.6), measured(1.6), entry=entry, codegen_now=now)
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False)
    assert "the optimized side ran other kernels than blessed" in result.note


def test_a_drop_on_the_optimized_sides_own_other_pick_is_a_regression_even_within_moved() -> None:
    """The fresh H100 of 2026-11-27: max-autotune's compile launched a third set of kernels, faster than blessed;
    slowed by 5%, its optimized side read 2.6% over its blessed time (within MOVED) and the speedup 2.6% under a 2%
    tolerance. Undoing its pick put it back at its blessed time, so it read pick-changed and passed. The optimized
    side's kernels are what the case gates: regressed, with the pick named. The same pick faster stays pick-changed."""
    entry = {**ENTRY, "codegen": sides([{"name": "triton_tem_fused_addmm_1"}, {"name": "triton_red_fused_2"}])}
    now = sides([{"name": "triton_red_fused_1"}])
    slowed = measured(1.948, reference_ms=2.0)  # the optimized side 1.0 -> 1.027 ms
    result, _ = judged(slowed, slowed, entry=entry, codegen_now=now, tolerance=0.02)
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False), result.note
    assert ("the optimized side ran other kernels than blessed, and that is the optimized side's own speed, which the "
            "case gates (+2.7% against the bless): regressed") in result.note
    faster = measured(2.07, reference_ms=2.0)
    result, _ = judged(faster, entry=entry, codegen_now=now, tolerance=0.02)
    assert result.verdict == Verdict.PICK_CHANGED, result.note


def test_a_faster_run_on_another_pick_is_pick_changed() -> None:
    entry = {**ENTRY, "codegen": sides([{"name": "_k", "grid": [132, 1, 1]}])}
    now = sides([{"name": "triton_tem_fused_mm_0", "grid": [132, 1, 1]}])
    result, _ = judged(measured(2.4), measured(2.4), entry=entry, codegen_now=now)
    assert result.verdict == Verdict.PICK_CHANGED
    assert not fails(result.verdict, strict=False) and fails(result.verdict, strict=True)


def test_a_pass_on_a_pick_the_entry_never_saw_is_pick_changed_and_a_known_pick_catches_the_slowdown() -> None:
    """The fresh 2 x H100 study of 2026-11-28: max-autotune's compile launched kernels the entry never saw, 7% faster
    than blessed; slowed by 5%, that side read 1.1% faster than blessed and the speedup 0.4% under the baseline: a
    plain pass, the slowdown hidden behind the faster pick. A pass on another pick is named, and red under strict.
    Recorded as one of the entry's picks (speedgate evidence), the same kernels are judged against that pick's own
    numbers, and the slowdown is caught."""
    from speedgate import picks

    blessed_kernels = sides([{"name": "triton_tem_fused_addmm_1"}, {"name": "triton_red_fused_2"}])
    other = sides([{"name": "triton_red_fused_1"}, {"name": "triton_per_fused_3"}])
    entry = {**ENTRY, "codegen": blessed_kernels}
    slowed = measured(1.99, reference_ms=2.0)  # the faster pick (1.0 -> 0.94 ms) slowed by 5% of its blessed time
    result, _ = judged(slowed, entry=entry, codegen_now=other, tolerance=0.02)
    assert result.verdict == Verdict.PICK_CHANGED, result.note
    assert result.note.startswith("the optimized side ran other kernels than blessed, a pick this entry never saw: "
                                  "inside the band, but a pass on another pick says nothing")
    assert not fails(result.verdict, strict=False) and fails(result.verdict, strict=True)
    # The same kernels, known: the entry's other pick at 2.13x (0.94 ms); judged against it, -6.6% is a regression.
    known = {**entry, "picks": [{"codegen": other, "speedup": 2.13, "reference_ms": 2.0, "optimized_ms": 0.939,
                                 "tolerance": 0.02, "measured_at": "2026-11-28T01:30:00Z"}]}
    against, said = picks.judged_entry(known, other)
    assert against is not None and against["speedup"] == 2.13 and said
    result, _ = judged(slowed, slowed, slowed, entry=dict(against), codegen_now=other, tolerance=0.02)
    assert result.verdict == Verdict.REGRESSED, result.note
    # Kernels the bless saw, and the optimized kernel's own registers changed by an edit: no pick, a plain pass.
    assert judged(measured(2.0), entry=entry, codegen_now=blessed_kernels)[0].verdict == Verdict.PASS
    edited = sides([{"name": "triton_tem_fused_addmm_1", "registers": 90}, {"name": "triton_red_fused_2"}])
    reg_entry = {**ENTRY, "codegen": sides([{"name": "triton_tem_fused_addmm_1", "registers": 80},
                                             {"name": "triton_red_fused_2"}])}
    result, _ = judged(measured(2.0), entry=reg_entry, codegen_now=edited)
    assert result.verdict == Verdict.PASS and result.codegen_changes, result.note
    # Another pick after a compiler upgrade is the software's change, named as drift, not a pick.
    result, _ = judged(measured(2.0), entry=entry, codegen_now=other, software={"torch": "2.11.0", "triton": "3.7.1"})
    assert result.verdict == Verdict.PASS and result.codegen_drift, result.note


def test_an_edit_that_slowed_the_optimized_kernel_stays_a_regression_with_its_codegen_named() -> None:
    entry = {**ENTRY, "codegen": sides([{"name": "_k", "grid": [132, 1, 1], "registers": 168}])}
    now = sides([{"name": "_k", "grid": [132, 1, 1], "registers": 182}])
    result, _ = judged(measured(1.6), measured(1.6), entry=entry, codegen_now=now)
    assert result.verdict == Verdict.REGRESSED
    assert result.codegen_changes == ["optimized _k: registers 168 -> 182"]


def test_a_slowdown_that_adds_a_kernel_stays_a_regression() -> None:
    entry = {**ENTRY, "codegen": sides([{"name": "_k", "grid": [132, 1, 1]}])}
    now = sides([{"name": "spin"}, {"name": "_k", "grid": [132, 1, 1]}])
    result, _ = judged(measured(1.6), measured(1.6), entry=entry, codegen_now=now)
    assert result.verdict == Verdict.REGRESSED
    assert "codegen changed since the bless: optimized side launches more kernels than blessed: +spin" in result.note


def test_a_compiler_upgrade_that_changed_the_kernels_is_no_pick_and_is_named_with_the_software() -> None:
    entry = {**ENTRY, "codegen": sides([{"name": "_k", "registers": 168, "spills": 0}])}
    now = sides([{"name": "_k", "registers": 255, "spills": 24}])
    upgraded = {"torch": "2.11.0", "triton": "3.7.1"}
    result, _ = judged(measured(1.6), measured(1.6), entry=entry, codegen_now=now, software=upgraded)
    assert result.verdict == Verdict.REGRESSED and result.codegen_drift
    assert "codegen changed since the bless after triton 3.6.0 -> 3.7.1: optimized _k: registers 168 -> 255" in result.note
    passing, _ = judged(measured(2.0), entry=entry, codegen_now=now, software=upgraded)
    assert passing.verdict == Verdict.PASS and passing.codegen_drift and passing.codegen_changes


# -- the gate, end to end: a strict run fails on kernels an upgrade changed, reports a pick -------------------------

CONFTEST = """
import pytest
from speedgate.testing import ScriptedTimer

KERNELS = {"reference": [{"name": "nvjet_gemm"}], "optimized": [{"name": "_k", "registers": 168, "spills": 0}]}

@pytest.fixture
def speedgate_timer():
    profile = {"events_ms": 1.0, "busy_ms": 1.0, "all_streams_ms": 1.0}
    return ScriptedTimer({"reference": 2.0, "optimized": 1.0},
                         profiles={"reference": {**profile, "events_ms": 2.0, "busy_ms": 2.0, "kernels": KERNELS["reference"]},
                                   "optimized": {**profile, "kernels": [{"name": "_k", "registers": 255, "spills": 24}]}})
"""
def project(pytester: pytest.Pytester, software: dict[str, str]) -> Path:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=ONE_COMPARISON)
    pytester.makeini("[pytest]\n")
    entry = {**ENTRY, "software": software, "tolerance": 0.05,
             "codegen": {"reference": [{"name": "nvjet_gemm"}], "optimized": [{"name": "_k", "registers": 168, "spills": 0}]}}
    return write_entries(pytester.path, {"test_cases.py::test_gemm": entry}, software).parent


def test_strict_fails_a_case_whose_kernels_changed_with_the_software(pytester: pytest.Pytester) -> None:
    from speedgate.hardware import detect

    now = detect("test-box").software
    project(pytester, {k: "0.0.0" for k in codegen.COMPILERS if k in now})  # blessed on other compilers than this run's
    result = pytester.runpytest("--hardware-key", "test-box", "--speedgate-strict", "--speedgate-json", "run.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the kernels changed with the software since the bless: optimized _k: registers 168 -> 255*"])
    case = json.loads((pytester.path / "run.json").read_text())["cases"][0]
    assert case["verdict"] == "pass" and case["codegen_drift"]
    assert "optimized _k: spills 0 -> 24" in case["codegen_changes"]


def test_without_new_software_a_codegen_change_is_reported_not_failed(pytester: pytest.Pytester) -> None:
    from speedgate.hardware import detect

    project(pytester, {k: v for k, v in detect("test-box").software.items() if k in codegen.COMPILERS})
    result = pytester.runpytest("--hardware-key", "test-box", "--speedgate-strict", "--speedgate-json", "run.json")
    result.assert_outcomes(passed=1)
    case = json.loads((pytester.path / "run.json").read_text())["cases"][0]
    assert case["codegen"]["optimized"] == [{"name": "_k", "registers": 255, "spills": 24}]
    assert "codegen changed since the bless: optimized _k: registers 168 -> 255" in case["note"]


# -- the evidence: facts recorded once, another pick never widens a tolerance ---------------------------------------

def report(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"speedgate_report_version": 1, "run_time": "2026-11-27T00:00:00Z",
            "fingerprints": {"test-box": {"software": SOFTWARE}}, "cases": records}


def record(speedup: float, kernels: dict[str, Any], card: str) -> dict[str, Any]:
    return {"case_id": "t.py::test", "nodeid": "t.py::test", "hardware_key": "test-box", "timed": True,
            "speedup": speedup, "reference_ms": speedup, "optimized_ms": 1.0, "timer": "scripted", "verdict": "pass",
            "card": card, "codegen": kernels}


def test_evidence_records_facts_where_an_entry_has_none_and_keeps_another_pick_apart() -> None:
    calibration = evidence.add_process({}, "card-a", 2.0, 0.001, "2026-11-26T00:00:00Z")
    calibration = evidence.add_process(calibration, "card-b", 2.01, 0.001, "2026-11-26T00:00:00Z")
    calibration.update(runs=2, spread=0.001, measured_at="2026-11-26T00:00:00Z")
    doc = {"hardware_key": "test-box", "cases": {"t.py::test": {**ENTRY, "calibration": calibration,
                                                                 "tolerance": evidence.tolerance_of(calibration)}}}
    blessed_pick = sides([{"name": "_k", "registers": 168}])
    first, lines, notes = evidence.add_reports(doc, [report([record(2.0, blessed_pick, "card-c")])])
    assert first["cases"]["t.py::test"]["codegen"] == blessed_pick
    assert "codegen facts recorded for 1 entries that had none or lacked some" in notes
    assert all(": tolerance " in line for line in lines)  # the CLI counts these as the tolerances it changed
    other = sides([{"name": "_k", "registers": 168}], reference=[{"name": "nvjet_other_gemm"}])  # cuBLAS's other pick
    gate_run = report([record(1.7, other, "card-d")])
    after, _, notes = evidence.add_reports(first, [gate_run])
    entry = after["cases"]["t.py::test"]
    assert "card-d" not in evidence.cards(entry["calibration"])  # never the main pick's evidence
    assert entry["tolerance"] == first["cases"]["t.py::test"]["tolerance"]
    assert any("another pick than the bless's: a new other pick of the entry" in line for line in notes)
    assert entry["codegen"] == blessed_pick  # a re-bless, never a report, replaces them
    # The other pick is recorded with its own numbers; a gate run has no in-process spread, so until a second
    # process joins it, it is judged with the main pick's tolerance.
    [pick] = entry["picks"]
    assert pick["codegen"] == other and pick["speedup"] == 1.7
    assert evidence.cards(pick["calibration"])["card-d"]["speedups"] == [1.7]
    assert pick["tolerance"] == entry["tolerance"]
    validate({**after, "schema_version": 1, "fingerprint": {"hardware": {"kind": "gpu", "name": "x"}, "software": {}}},
             "t.json")
    # The same report again is not added twice; another card's run of that pick joins its evidence.
    again, _, notes = evidence.add_reports(after, [gate_run])
    assert again == after and any("already in this file's evidence" in line for line in notes)
    more, _, _ = evidence.add_reports(after, [report([record(1.72, other, "card-e")])])
    [pick] = more["cases"]["t.py::test"]["picks"]
    assert sorted(evidence.cards(pick["calibration"])) == ["card-d", "card-e"]
    assert pick["tolerance"] == evidence.tolerance_of(pick["calibration"])


def test_a_pick_dropped_for_room_is_said_by_the_evidence_command_and_by_a_bless() -> None:
    from speedgate import picks

    calibration = evidence.add_process({}, "card-a", 2.0, 0.001, "2026-11-26T00:00:00Z")
    calibration.update(runs=2, spread=0.001, measured_at="2026-11-26T00:00:00Z")
    main = sides([{"name": "_k", "registers": 168}])
    doc = {"hardware_key": "test-box", "cases": {"t.py::test": {**ENTRY, "codegen": main, "calibration": calibration,
                                                                 "tolerance": evidence.tolerance_of(calibration)}}}
    other = [sides([{"name": "_k", "registers": 168}], reference=[{"name": f"nvjet_{i}"}])
             for i in range(picks.PICKS_KEPT + 1)]
    for i, kernels in enumerate(other[:-1]):
        doc, _, notes = evidence.add_reports(doc, [report([record(1.9 + i / 100, kernels, f"card-{i}")])])
        assert not any("dropped" in line for line in notes)
    assert len(doc["cases"]["t.py::test"]["picks"]) == picks.PICKS_KEPT
    doc, _, notes = evidence.add_reports(doc, [report([record(1.5, other[-1], "card-z")])])
    held = doc["cases"]["t.py::test"]["picks"]
    assert len(held) == picks.PICKS_KEPT and held[-1]["codegen"] == other[-1]
    assert [line for line in notes if "dropped" in line] == [
        "t.py::test: 1 earlier pick(s) dropped (1.9x of 2026-11-27): an entry keeps its "
        f"{picks.PICKS_KEPT} latest other picks; a run that draws one is judged against the main pick"]
    # A bless of yet another pick keeps the old main among the others, the newest, and drops the oldest.
    before = doc["cases"]["t.py::test"]
    newest = sides([{"name": "_k", "registers": 168}], reference=[{"name": "nvjet_new"}])
    _, others = picks.after_bless({**before, "codegen": newest}, before)
    assert len(others) == picks.PICKS_KEPT and others[-1]["codegen"] == main
    gone = picks.dropped(before, {**before, "codegen": newest, "picks": others})
    assert [float(p["speedup"]) for p in gone] == [1.91]  # the oldest left


def test_evidence_adds_the_facts_another_pick_lacks_from_a_run_of_that_pick_even_given_again() -> None:
    # The H200 file's training step: its other picks were recorded before a graph-replaying side's inductor kernels
    # carried their spills, and a gate run of one of those picks records them. They go to that pick, not the main
    # one; and a report already in the pick's evidence (added before the facts were taken from such runs) still
    # gives them, its speedup not added twice.
    calibration = evidence.add_process({}, "card-a", 2.0, 0.001, "2026-11-26T00:00:00Z")
    calibration.update(runs=2, spread=0.001, measured_at="2026-11-26T00:00:00Z")
    main = sides([{"name": "_k", "registers": 168}], reference=[{"name": "triton_poi_fused_0", "block": [256, 1, 1]}])
    other = sides([{"name": "_k", "registers": 168}], reference=[{"name": "triton_poi_fused_0", "block": [128, 1, 1]}])
    doc = {"hardware_key": "test-box", "cases": {"t.py::test": {
        **ENTRY, "codegen": main, "calibration": calibration, "tolerance": evidence.tolerance_of(calibration)}}}
    with_pick, _, _ = evidence.add_reports(doc, [report([record(1.8, other, "card-b")])])
    assert with_pick["cases"]["t.py::test"]["picks"][0]["codegen"] == other
    richer = sides([{"name": "_k", "registers": 168, "spills": 0}],
                   reference=[{"name": "triton_poi_fused_0", "block": [128, 1, 1], "spills": 0, "warps": 4}])
    later = report([record(1.81, richer, "card-c")])
    later["run_time"] = "2026-11-28T00:00:00Z"
    after, _, notes = evidence.add_reports(with_pick, [later])
    entry = after["cases"]["t.py::test"]
    [pick] = entry["picks"]
    assert pick["codegen"] == richer and entry["codegen"] == main
    assert any("codegen facts recorded for 1 entries" in line for line in notes)
    assert sorted(evidence.cards(pick["calibration"])) == ["card-b", "card-c"]
    # The same report again, into a file whose pick lacks the facts still: the facts, not the speedup.
    lacking = {**after, "cases": {"t.py::test": {**entry, "picks": [{**pick, "codegen": other}]}}}
    again, _, notes = evidence.add_reports(lacking, [later])
    assert again == after
    assert any("already in this file's evidence" in line for line in notes)
    # A run whose facts differ from the pick's (other registers on its reference kernel) adds nothing.
    differs = sides([{"name": "_k", "registers": 168}],
                    reference=[{"name": "triton_poi_fused_0", "block": [128, 1, 1], "registers": 40}])
    assert evidence.with_facts({**entry, "picks": [{**pick, "codegen": {**other, "reference": [
        {"name": "triton_poi_fused_0", "block": [128, 1, 1], "registers": 32}]}}]}, differs) is None


def test_evidence_records_facts_from_a_run_of_the_same_compilers_under_another_speedgate() -> None:
    # The H200 file's entries blessed with speedgate 0.1.0 had no facts; a gate run of 0.2.0 on the same torch, triton
    # and driver makes the same kernels, so it records them, while its speedups stay out of 0.1.0's evidence.
    calibration = evidence.add_process({}, "card-a", 2.0, 0.001, "2026-11-26T00:00:00Z")
    entry = {**ENTRY, "software": {**SOFTWARE, "pytest-speedgate": "0.1.0"}, "calibration": calibration,
             "tolerance": evidence.tolerance_of(calibration)}
    doc = {"hardware_key": "test-box", "cases": {"t.py::test": entry}}
    kernels = sides([{"name": "_k", "registers": 168}])
    newer = report([record(2.3, kernels, "card-b")])
    newer["fingerprints"]["test-box"]["software"] = {**SOFTWARE, "pytest-speedgate": "0.2.0"}
    after, lines, _ = evidence.add_reports(doc, [newer])
    assert after["cases"]["t.py::test"]["codegen"] == kernels
    assert "card-b" not in evidence.cards(after["cases"]["t.py::test"]["calibration"])
    # Another triton makes other kernels: nothing recorded from it.
    other = report([record(2.0, kernels, "card-c")])
    other["fingerprints"]["test-box"]["software"] = {**SOFTWARE, "triton": "9.9.9"}
    assert "codegen" not in evidence.add_reports(doc, [other])[0]["cases"]["t.py::test"]


def test_evidence_adds_the_facts_an_entrys_kernels_lack_from_a_run_of_the_same_kernels() -> None:
    # The CUTLASS entries were blessed before their kernels' spills and PTX mix were read: a gate run of the same
    # kernels (every fact both hold equal) adds them, never replacing one; a run of other kernels adds nothing.
    calibration = evidence.add_process({}, "card-a", 2.0, 0.001, "2026-11-26T00:00:00Z")
    blessed = sides([{"name": "kernel_cutlass_gemm_0", "grid": [2, 1, 66], "registers": 168}])
    entry = {**ENTRY, "codegen": blessed, "calibration": calibration, "tolerance": evidence.tolerance_of(calibration)}
    doc = {"hardware_key": "test-box", "cases": {"t.py::test": entry}}
    richer = sides([{"name": "kernel_cutlass_gemm_0", "grid": [2, 1, 66], "registers": 168, "spills": 0,
                     "ptx": {"mma": 64, "total": 3000}}])
    after, _, notes = evidence.add_reports(doc, [report([record(2.0, richer, "card-b")])])
    assert after["cases"]["t.py::test"]["codegen"] == richer
    assert "codegen facts recorded for 1 entries that had none or lacked some" in notes
    assert codegen.completed(richer, richer) is None  # nothing to add: left as it is
    # A run whose test failed by this comparison's regression ran the same kernels: its facts complete the entry
    # (the H100 study's k_chunked run); one whose test failed for another reason gives nothing.
    regressed = {**record(1.9, richer, "card-b"), "test_failed": True, "verdict": "regressed"}
    after, _, _ = evidence.add_reports(doc, [report([regressed])])
    assert after["cases"]["t.py::test"]["codegen"] == richer
    broken = {**record(2.0, richer, "card-b"), "test_failed": True, "verdict": "pass"}
    kept, _, _ = evidence.add_reports(doc, [report([broken])])
    assert kept["cases"]["t.py::test"]["codegen"] == blessed
    # Other kernels (another grid) or a fact that differs: nothing added, the blessed facts stay.
    for other in ([{"name": "kernel_cutlass_gemm_0", "grid": [1, 1, 132], "registers": 168, "spills": 0}],
                  [{"name": "kernel_cutlass_gemm_0", "grid": [2, 1, 66], "registers": 170, "spills": 0}]):
        kept, _, _ = evidence.add_reports(doc, [report([record(2.0, sides(other), "card-c")])])
        assert kept["cases"]["t.py::test"]["codegen"] == blessed


def test_a_wide_tolerance_names_what_set_it() -> None:
    calibration = evidence.add_process({}, "card-a", 1.0, 0.038, "2026-11-26T00:00:00Z")
    calibration = evidence.add_process(calibration, "card-b", 1.01, 0.031, "2026-11-26T00:00:00Z")
    assert evidence.cause_of({"calibration": calibration}) == \
        "the spread between runs in one process: 3.80% on card card-a (the widest of 2 processes on 2 cards)"
    for card, speedup in (("card-c", 0.90), ("card-d", 1.10)):
        calibration = evidence.add_process(calibration, card, speedup, 0.001, "2026-11-26T00:00:00Z")
    said = evidence.cause_of({"calibration": calibration})
    assert said.startswith("the spread between 4 processes on 4 cards:") and "(speedups 0.9-1.1x" in said
    assert evidence.cause_of({}).startswith("no calibration")


def test_a_wide_tolerance_names_the_side_whose_rounds_vary_most() -> None:
    """The H100 fp8 tiled-4096 `vs_scaled_mm` entry (6.6%): its bless's reference rounds varied by 1.08% (CV), the
    Triton kernel's by 0.48%, and in the gate study's clean runs the cuBLAS reference moved most between cards. What
    set the band names that side; two quiet sides, or two alike, name none or both."""
    calibration = evidence.add_process({}, "card-a", 0.75, 0.0221, "2026-11-27T18:02:32Z")
    entry = {"calibration": calibration, "reference_cv": 0.01079, "optimized_cv": 0.004794}
    assert evidence.cause_of(entry) == (
        "the spread between runs in one process: 2.21% on card card-a (the widest of 1 process); within a run, the "
        "reference's rounds vary most (CV 1.08% against the optimized side's 0.48%)")
    flex = {"reference_cv": 0.0005, "optimized_cv": 0.0114}
    assert evidence.noisier_side(flex) == \
        "within a run, the optimized side's rounds vary most (CV 1.14% against the reference's 0.05%)"
    assert evidence.noisier_side({"reference_cv": 0.0846, "optimized_cv": 0.079}) == \
        "both sides' rounds vary within a run (CV 8.46% and 7.90%)"
    assert evidence.noisier_side({"reference_cv": 0.004, "optimized_cv": 0.001}) is None  # both quiet
    assert evidence.noisier_side({"reference_cv": None, "optimized_cv": 0.02}) is None  # not recorded


def test_a_stamped_call_launches_one_stamp_before_and_one_after_it_one_program_per_sm() -> None:
    from speedgate.timers.cycles import stamped

    launched: list[tuple] = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda buf, num_warps: launched.append(("stamp", grid, buf, num_warps))

    call = stamped(Kernel(), 132, lambda: launched.append(("call",)) or "out", "before", "after")
    assert launched == []  # wrapping launches nothing
    assert call() == "out"
    assert launched == [("stamp", (132,), "before", 1), ("call",), ("stamp", (132,), "after", 1)]


# -- other picks: a run of a known pick is judged against that pick's own numbers -----------------------------------

PICK_CONFTEST = """
import os
import pytest
from speedgate.testing import ScriptedTimer

def kernels(block):
    return {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [block, 1, 1]}], "optimized": [{"name": "_k"}]}

@pytest.fixture
def speedgate_timer():
    reference_ms, block = float(os.environ["REF_MS"]), int(os.environ["BLOCK"])
    profile = {"events_ms": 1.0, "busy_ms": 1.0, "all_streams_ms": 1.0}
    return ScriptedTimer({"reference": reference_ms, "optimized": 1.0},
                         profiles={"reference": {**profile, "events_ms": reference_ms, "busy_ms": reference_ms,
                                                 "kernels": kernels(block)["reference"]},
                                   "optimized": {**profile, "kernels": kernels(block)["optimized"]}})
"""


def pick_project(pytester: pytest.Pytester) -> None:
    from speedgate.hardware import detect

    software = detect("test-box").software
    pytester.makeconftest(PICK_CONFTEST)
    pytester.makepyfile(test_cases=ONE_COMPARISON)
    pytester.makeini("[pytest]\n")
    calibration = {"runs": 2, "spread": 0.001, "measured_at": "2026-11-27T00:00:00Z"}

    def numbers(speedup: float) -> dict[str, Any]:
        return {"speedup": speedup, "reference_ms": speedup, "optimized_ms": 1.0, "ci_low": speedup * 0.999,
                "ci_high": speedup * 1.001, "noise": 0.001, "rounds": 40}

    # Blessed on two cards whose compiled references picked GELU kernels of other block sizes: 2.0x at block 256
    # (the main pick) and 2.1x at block 128 (another pick), each with its own 2% tolerance.
    entry = {**numbers(2.0), "timer": "scripted", "measured_at": "2026-11-27T00:00:00Z", "software": software,
             "tolerance": 0.02, "calibration": calibration,
             "codegen": {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [256, 1, 1]}],
                         "optimized": [{"name": "_k"}]},
             "picks": [{**numbers(2.1), "tolerance": 0.02, "calibration": calibration, "measured_at": "2026-11-27",
                        "codegen": {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [128, 1, 1]}],
                                    "optimized": [{"name": "_k"}]}}]}
    write_entries(pytester.path, {"test_cases.py::test_gemm": entry}, software)


def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, reference_ms: float, block: int) -> dict[str, Any]:
    monkeypatch.setenv("REF_MS", str(reference_ms))
    monkeypatch.setenv("BLOCK", str(block))
    result = pytester.runpytest("--hardware-key", "test-box", "--speedgate-json", "run.json")
    case: dict[str, Any] = json.loads((pytester.path / "run.json").read_text())["cases"][0]
    case["outcome"] = result.ret
    return case


def test_a_flip_to_a_known_pick_is_judged_against_that_pick_and_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pick_project(pytester)
    case = gate(pytester, monkeypatch, 2.1, 128)
    assert case["verdict"] == "pass" and case["outcome"] == 0, case["note"]
    assert "judged against the entry's other pick 1" in case["note"] and "blessed 2.100x" in case["note"]


def test_a_slowdown_cannot_hide_behind_a_faster_known_pick(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other pick is 5% faster than the main one: a 5.7% slowdown on it reads 1.98x, inside the main pick's
    band (2.0x, 2%). Judged against its own pick (2.1x) it is a regression."""
    pick_project(pytester)
    case = gate(pytester, monkeypatch, 1.98, 128)
    assert case["verdict"] == "regressed" and case["outcome"] == 1, case["note"]
    assert "judged against the entry's other pick 1" in case["note"]


def test_the_main_pick_is_judged_as_before(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pick_project(pytester)
    case = gate(pytester, monkeypatch, 2.0, 256)
    assert case["verdict"] == "pass" and not case.get("judged_pick")


def test_two_blesses_of_other_picks_keep_both_and_the_gate_judges_each(pytester: pytest.Pytester,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user: bless on one card (block 256, 2.0x), bless again where the reference picked block 128 (2.1x), both
    with --speedgate-calibrate 2; the file keeps both picks, `python -m speedgate evidence` shows them, and a gate run
    of either pick is judged against its own speedup."""
    import subprocess
    import sys

    pytester.makeconftest(PICK_CONFTEST)
    pytester.makepyfile(test_cases=ONE_COMPARISON)
    pytester.makeini("[pytest]\n")
    for reference_ms, block in ((2.0, 256), (2.1, 128)):
        monkeypatch.setenv("REF_MS", str(reference_ms))
        monkeypatch.setenv("BLOCK", str(block))
        blessed = pytester.runpytest("--hardware-key", "test-box", "--update-baselines", "--speedgate-calibrate", "2")
        blessed.assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test-box.json"
    entry = json.loads(path.read_text())["cases"]["test_cases.py::test_gemm"]
    assert entry["speedup"] == 2.1 and entry["codegen"]["reference"][0]["block"] == [128, 1, 1]
    [pick] = entry["picks"]
    assert pick["speedup"] == 2.0 and pick["codegen"]["reference"][0]["block"] == [256, 1, 1]
    shown = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path)], capture_output=True, text=True,
                           check=True).stdout
    assert "  other pick 1 (2x): tolerance 2.0%" in shown
    assert gate(pytester, monkeypatch, 2.0, 256)["verdict"] == "pass"
    slowed = gate(pytester, monkeypatch, 1.9, 256)  # 5% under its own pick, 9.5% under the main one
    assert slowed["verdict"] == "regressed" and "judged against the entry's other pick 1" in slowed["note"]
    assert gate(pytester, monkeypatch, 2.1, 128)["verdict"] == "pass"


def test_two_processes_blessing_other_picks_at_once_keep_both(pytester: pytest.Pytester) -> None:
    """Two cards blessing into one file at the same moment (as `-n 2` or two CI runners do), each process with
    another pick: the file's lock serializes them, and whichever came second keeps the first's pick among its
    picks. Nothing either process measured is lost."""
    import os
    import subprocess
    import sys

    pytester.makeconftest(PICK_CONFTEST)
    pytester.makepyfile(test_cases=ONE_COMPARISON)
    pytester.makeini("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hardware-key", "test-box",
            "--update-baselines", "--speedgate-calibrate", "2"]
    runs = [subprocess.Popen(args, cwd=pytester.path, env={**os.environ, "REF_MS": ms, "BLOCK": block},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for ms, block in (("2.0", "256"), ("2.1", "128"))]
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, out[-2000:]
    entry = json.loads((pytester.path / "baselines" / "test-box.json").read_text())["cases"]["test_cases.py::test_gemm"]
    [pick] = entry["picks"]
    assert sorted([entry["speedup"], pick["speedup"]]) == [2.0, 2.1]
    assert {entry["codegen"]["reference"][0]["block"][0], pick["codegen"]["reference"][0]["block"][0]} == {128, 256}


def test_the_real_inductor_autotuners_run_is_the_method_hooked_and_given_back() -> None:
    """The names compiled_launches hooks are torch's own: inductor's CachingAutotuner and DebugAutotuner each define
    run (the method its generated code calls on every kernel), hooked inside and given back after."""
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    classes = [heuristics.CachingAutotuner, heuristics.DebugAutotuner]
    methods = [klass.__dict__["run"] for klass in classes]
    with codegen.compiled_launches():
        assert all(klass.__dict__["run"] is not method for klass, method in zip(classes, methods))
    assert [klass.__dict__["run"] for klass in classes] == methods


def test_the_schema_holds_as_many_other_picks_as_an_entry_keeps() -> None:
    from speedgate import picks
    from speedgate.baseline import schema

    assert schema()["$defs"]["case"]["properties"]["picks"]["maxItems"] == picks.PICKS_KEPT
