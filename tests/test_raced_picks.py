"""An autotuner's race on the optimized side: inductor's kernel of the same source and settings run at another config
in this process (speedgate.codegen.race_of, raced_kernels, unraced_factor; speedgate.judging.check_pick). Such a
drop is pick-changed where the raced kernels' share of the side's kernel time accounts for it, and stays a
regression wherever anything else moved: another kernel, the host's time, the source, the settings, new work. And
kernels of no pick, judged against the pick nearest to them by the shares (speedgate.picks.nearest), so that new work
on a faster pick cannot pass against a slower main pick. CPU only: recorded kernels' facts, scripted times."""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import Any

import pytest

from conftest import ONE_COMPARISON, entries_doc, write_entries
from speedgate import codegen, judging
from speedgate.baseline import BaselineError, validate
from speedgate.measure import Measurement, measurement_from_samples
from speedgate.verdict import Verdict, fails

SOFTWARE = {"torch": "2.11.0", "triton": "3.6.0"}
ENTRY = {"speedup": 2.0, "reference_ms": 2.0, "optimized_ms": 1.0, "ci_low": 1.98, "ci_high": 2.02, "noise": 0.01,
         "rounds": 40, "timer": "scripted", "measured_at": "2026-11-28T00:00:00Z", "software": SOFTWARE,
         "tolerance": 0.02}
RACE = "0123456789abcdef"
REFERENCE = [{"name": "nvjet_gemm", "grid": [66, 2, 1], "share": 1.0}]


def tuner(src: str = "def k(x): pass", meta: dict[str, Any] | None = None, size_hints: Any = None) -> Any:
    """A stand-in of inductor's CachingAutotuner that has chosen (one launcher)."""
    launcher = types.SimpleNamespace(config=types.SimpleNamespace(num_warps=16, num_stages=1), n_regs=50, n_spills=0,
                                     shared=8192)
    return types.SimpleNamespace(fn=types.SimpleNamespace(__name__="triton_red_fused_gelu_1", src=src),
                                 inductor_meta={"kernel_name": "triton_red_fused_gelu_1", "autotune_pointwise": True,
                                                **(meta or {})},
                                 size_hints=size_hints or {"x": 4096, "r0_": 1024}, heuristic_type="REDUCTION",
                                 launchers=[launcher])


def test_a_race_is_the_kernels_source_size_hints_and_settings_and_nothing_a_process_owns() -> None:
    race = codegen.compiled_facts(tuner())["race"]
    assert len(race) == 16 and int(race, 16) >= 0
    assert codegen.compiled_facts(tuner(meta={"device": object()}))["race"] == race  # not the same in two processes
    assert codegen.compiled_facts(tuner(src="def k(x): x += 1"))["race"] != race  # an edit of the kernel
    assert codegen.compiled_facts(tuner(meta={"autotune_pointwise": False}))["race"] != race  # other candidates
    assert codegen.compiled_facts(tuner(size_hints={"x": 8192, "r0_": 1024}))["race"] != race  # another problem
    # Before the autotuner has chosen: the name and the race, no candidate's launch facts.
    unchosen = tuner()
    unchosen.launchers = [unchosen.launchers[0]] * 2
    assert codegen.compiled_facts(unchosen) == {"name": "triton_red_fused_gelu_1", "race": race}
    no_source = tuner()
    del no_source.fn.src
    assert "race" not in codegen.compiled_facts(no_source)


def test_the_traces_durations_give_each_kernel_its_share_of_the_sides_kernel_time() -> None:
    events = [("spin", 13, "{}", 500.0), ("_a", 7, '{"grid": [8, 1, 1]}', 30.0), ("_b", 7, '{"grid": [4, 1, 1]}', 10.0),
              ("_a", 7, '{"grid": [8, 1, 1]}', 50.0), ("fill", 13, "{}", 400.0)]
    kernels = codegen.trace_kernels(events, skip_stream=13)
    assert [(k["name"], k["share"]) for k in kernels] == [("_a", 0.8889), ("_b", 0.1111)]
    # One event without a duration: no share for any kernel, rather than shares of part of the time.
    assert all("share" not in k for k in codegen.trace_kernels([*events, ("_c", 7, "{}", None)], skip_stream=13))


def kernels(reduction: dict[str, Any], gemm_share: float, *, gemm: dict[str, Any] | None = None) -> dict[str, Any]:
    """A compiled optimized side of two kernels: inductor's reduction (raced, or not) and a GEMM."""
    return {"reference": REFERENCE,
            "optimized": [{"name": "triton_red_fused_gelu_1", "share": round(1 - gemm_share, 4), **reduction},
                          {"name": "_gemm", "grid": [132, 1, 1], "registers": 168, "share": gemm_share,
                           **(gemm or {})}]}


# Blessed: the reduction 0.1 ms of the side's 1.0 ms of kernels; in the run, inductor kept a config that takes
# 0.2 ms (the rung 4 false alarm of the fourteenth H200 study: registers 32 -> 50, 4 -> 8 KiB of shared memory).
BLESSED = kernels({"block": [512, 1, 1], "registers": 32, "shared_bytes": 4096, "race": RACE}, 0.9)
RACED = kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": RACE}, 0.8182)


def measured(speedup: float, reference_ms: float = 2.0, rounds: int = 40) -> Measurement:
    ref = [reference_ms * (1 + 0.002 * ((i % 5) - 2)) for i in range(rounds)]
    opt = [reference_ms / speedup * (1 + 0.002 * (((i * 3) % 5) - 2)) for i in range(rounds)]
    return measurement_from_samples(ref, opt, reference_first_ms=None, optimized_first_ms=None, seconds=1.0,
                                    stopped_by="converged", timer="scripted")


def judged(m: Measurement, now: dict[str, Any], entry_kernels: dict[str, Any] = BLESSED,
           busy_ms: float | None = None, entry: Mapping[str, Any] | None = None) -> Any:
    """The verdict of `m` with kernels `now` against ENTRY with `entry_kernels`, or against `entry` where given."""
    fields = {"case_id": "t.py::test", "nodeid": "t.py::test", "name": None, "hardware_key": "test-box",
              "tolerance": 0.02, "codegen": now, "optimized_busy_ms": busy_ms}
    result, _, _ = judging.judge_measurement(
        m, lambda: m, fields, entry=dict(entry) if entry is not None else {**ENTRY, "codegen": entry_kernels},
        file_found=True, remeasure=True,
        graphed=False, throttled={}, roofline=lambda _: {}, closeness=[], software=SOFTWARE)
    return result


def test_a_drop_that_is_the_optimized_sides_autotuner_picking_another_config_is_pick_changed() -> None:
    slower = measured(2.0 / 1.1)  # the optimized side 1.0 -> 1.1 ms, all of it the reduction's other config
    result = judged(slower, RACED, busy_ms=1.1)
    assert result.verdict == Verdict.PICK_CHANGED, result.note
    assert ("the optimized side ran another of inductor's configs of triton_red_fused_gelu_1 (the same kernel "
            "source and settings: the autotuner's pick in this process, not an edit)") in result.note
    assert "with those kernels at their blessed share of the side's kernel time the speedup reads 2.00" in result.note
    assert "triton_red_fused_gelu_1: registers 32 -> 50" in result.note  # the change stays named
    assert not fails(result.verdict, strict=False) and fails(result.verdict, strict=True)
    # Without the side's kernel time per call the whole side is weighed: the same reading here.
    assert judged(slower, RACED).verdict == Verdict.PICK_CHANGED


def test_a_slowdown_of_the_sides_other_kernel_beside_a_race_stays_a_regression() -> None:
    """The GEMM 10% slower (an edit that left its launch facts as they were) in the process that raced the
    reduction: the GEMM's own share carries its slowdown into the undone time."""
    both = kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": RACE}, 0.8319)
    result = judged(measured(2.0 / 1.19), both, busy_ms=1.19)  # 0.99 + 0.2 ms of kernels
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False), result.note
    assert ("but with those kernels at their blessed share of the side's kernel time the speedup would still read "
            "1.81") in result.note


def test_host_time_added_beside_a_race_stays_a_regression() -> None:
    """A launch-bound side timed from an idle device: 0.1 ms more of the host's work between launches in the process
    that raced the reduction. Only the kernels' part of the side is undone."""
    result = judged(measured(2.0 / 1.2), RACED, busy_ms=1.1)  # 1.1 ms of kernels, 0.1 ms of host
    assert result.verdict == Verdict.REGRESSED, result.note
    # Only the kernels' time is scaled: the 0.1 ms of host work stays whole (1.1 ms undone, 2.0 / 1.1), where
    # scaling the whole side would have excused a tenth of it; a side without a known kernel time is scaled whole.
    factor = 0.8182 / 0.9
    assert judging.undo_race(2.0 / 1.2, factor, 1.2, 1.1) == pytest.approx(2.0 / 1.1, rel=1e-3)
    assert judging.undo_race(2.0 / 1.2, factor, 1.2, None) == pytest.approx(2.0 / (1.2 * factor), rel=1e-3)
    assert judging.undo_race(2.0, None, 1.0, 1.0) is None  # no shares: nothing to weigh by
    assert judging.undo_race(2.0, factor, 1.0, 1.0, side="reference") == pytest.approx(2.0 * factor, rel=1e-3)


@pytest.mark.parametrize("now, changed", [
    # Another source or settings: an edit of the kernel, or of what inductor chose its config from.
    (kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": "fedcba9876543210"}, 0.8182),
     "optimized triton_red_fused_gelu_1: registers 32 -> 50"),
    (kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192}, 0.8182),  # no race recorded now
     "optimized triton_red_fused_gelu_1: registers 32 -> 50"),
    # The reduction raced, and the GEMM, which no autotuner of inductor's picks, launched otherwise: an edit too.
    (kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": RACE}, 0.8182,
             gemm={"registers": 170}), "optimized _gemm: registers 168 -> 170"),
])
def test_a_drop_where_a_kernel_changed_without_its_race_stays_a_regression(now: dict[str, Any], changed: str) -> None:
    result = judged(measured(2.0 / 1.1), now, busy_ms=1.1)
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False), result.note
    assert changed in result.codegen_changes and "inductor's configs" not in result.note


def test_a_race_beside_another_kernel_whose_source_changed_stays_a_regression() -> None:
    """The reduction raced, and the side's other kernel of inductor's launched as blessed but with another race (its
    source or settings edited): an edit in the side, whatever the shares say."""
    blessed = kernels({"block": [512, 1, 1], "registers": 32, "shared_bytes": 4096, "race": RACE}, 0.9,
                      gemm={"race": "1111111111111111"})
    edited = kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": RACE}, 0.8182,
                     gemm={"race": "2222222222222222"})
    assert codegen.raced_on(blessed, edited) == [] and codegen.repicked_sides(blessed, edited) == []
    result = judged(measured(2.0 / 1.1), edited, entry_kernels=blessed, busy_ms=1.1)
    assert result.verdict == Verdict.REGRESSED and "inductor's configs" not in result.note, result.note


def test_new_work_beside_a_race_stays_a_regression() -> None:
    spun = {**RACED, "optimized": [{"name": "spin_kernel", "share": 0.05}, *RACED["optimized"]]}
    result = judged(measured(2.0 / 1.1), spun, busy_ms=1.1)
    assert result.verdict == Verdict.REGRESSED, result.note
    assert "optimized side launches more kernels than blessed: +spin_kernel" in result.note


def test_an_entry_blessed_without_shares_cannot_weigh_a_race_and_says_so() -> None:
    unweighed = {side: [{k: v for k, v in kernel.items() if k != "share"} for kernel in facts]
                 for side, facts in BLESSED.items()}
    result = judged(measured(2.0 / 1.1), RACED, entry_kernels=unweighed, busy_ms=1.1)
    assert result.verdict == Verdict.REGRESSED, result.note
    assert "the other config cannot be weighed: the entry records no share of the side's kernel time" in result.note
    # An entry blessed before races were recorded: the side's own kernel reshaped, a regression as before.
    unraced = {side: [{k: v for k, v in kernel.items() if k != "race"} for kernel in facts]
               for side, facts in BLESSED.items()}
    result = judged(measured(2.0 / 1.1), RACED, entry_kernels=unraced, busy_ms=1.1)
    assert result.verdict == Verdict.REGRESSED and "inductor's configs" not in result.note, result.note
    assert "optimized triton_red_fused_gelu_1: registers 32 -> 50" in result.codegen_changes


def test_a_race_that_took_the_whole_side_cannot_be_weighed() -> None:
    """A side of one kernel, raced: no other kernel's share tells the card's pace from the config's."""
    alone = {"reference": REFERENCE, "optimized": [{**BLESSED["optimized"][0], "share": 1.0}]}
    now = {"reference": REFERENCE, "optimized": [{**RACED["optimized"][0], "share": 1.0}]}
    assert codegen.unraced_factor(alone, now) is None
    assert judged(measured(2.0 / 1.1), now, entry_kernels=alone).verdict == Verdict.REGRESSED


def test_a_pass_on_a_raced_config_is_judged_as_the_blessed_kernels_would_have_read() -> None:
    """The race alone, within the band either way: a pass, said. A faster config that hid a slowdown of the GEMM
    (the reduction 0.05 ms instead of 0.1, the GEMM 6% slower): as blessed, the side would have read under the
    floor, regressed. Another side repicked beside the race: pick-changed, as any pass on another pick."""
    result = judged(measured(2.0 / 1.015), kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192,
                                                     "race": RACE}, 0.8867), busy_ms=1.015)
    assert result.verdict == Verdict.PASS, result.note
    assert "inside the band: a pass of the blessed kernels" in result.note
    hid = kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": RACE}, 0.9502)
    result = judged(measured(2.0 / 1.004), hid, busy_ms=1.004)  # 0.954 + 0.05 ms: a pass as measured
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False), result.note
    assert "the other configs hid a slowdown, regressed" in result.note
    # The reference launched another library kernel beside the race: pick-changed, as any pass on another pick.
    both = {**RACED, "reference": [{"name": "nvjet_gemm", "grid": [33, 2, 1], "share": 1.0}]}
    result = judged(measured(2.0), both, busy_ms=1.0)
    assert result.verdict == Verdict.PICK_CHANGED and "a pick this entry never saw" in result.note


# A compiled reference of two kernels: inductor's GELU (raced, or not) and a GEMM, 2.0 ms in all when blessed.
REF_BLESSED = [{"name": "triton_poi_fused_gelu_0", "block": [256, 1, 1], "race": "aaaaaaaaaaaaaaaa", "share": 0.1},
               {"name": "nvjet_gemm", "grid": [66, 2, 1], "share": 0.9}]


def reference_race(gelu_share: float) -> list[dict[str, Any]]:
    return [{**REF_BLESSED[0], "block": [128, 1, 1], "share": gelu_share}, {**REF_BLESSED[1], "share": 1 - gelu_share}]


def test_a_pass_on_the_compiled_references_race_is_judged_as_the_blessed_kernels_would_have_read() -> None:
    """The second processes of the race check (rung 4's vs_compile): the compiled reference ran another config of
    one kernel, and the optimized side of its reduction. A pass on those read pick-changed, which fails a strict gate;
    judged as the blessed kernels would have read, it is a pass, said. A reference race that hid an optimized slowdown
    (its GELU 0.2 ms slower, the optimized side 10% slower on its blessed kernels: 2.0x as measured) is a regression.
    A drop that both races account for is pick-changed."""
    blessed = {"reference": REF_BLESSED, "optimized": BLESSED["optimized"]}
    both = {"reference": reference_race(0.1), "optimized": RACED["optimized"]}
    result = judged(measured(2.0), {"reference": reference_race(0.1), "optimized": BLESSED["optimized"]},
                    entry_kernels=blessed)
    assert result.verdict == Verdict.PASS, result.note
    assert ("the reference side ran another of inductor's configs of triton_poi_fused_gelu_0 (the same kernel source "
            "and settings") in result.note and "inside the band: a pass of the blessed kernels" in result.note
    as_fast = kernels({"block": [512, 1, 1], "registers": 50, "shared_bytes": 8192, "race": RACE}, 0.9)["optimized"]
    result = judged(measured(2.0), {"reference": reference_race(0.1), "optimized": as_fast}, entry_kernels=blessed,
                    busy_ms=1.0)  # both sides raced, each config as fast as the blessed one
    assert result.verdict == Verdict.PASS and "and the optimized side another of inductor's configs" in result.note
    hid = {"reference": reference_race(0.1818), "optimized": BLESSED["optimized"]}  # reference 2.0 -> 2.2 ms
    result = judged(measured(2.0, reference_ms=2.2), hid, entry_kernels=blessed)  # optimized 1.0 -> 1.1 ms
    assert result.verdict == Verdict.REGRESSED and fails(result.verdict, strict=False), result.note
    assert "the speedup reads 1.818x, under the floor" in result.note and "the other configs hid a slowdown" in result.note
    result = judged(measured(2.0 / 1.1), both, entry_kernels=blessed, busy_ms=1.1)  # the optimized race's drop
    assert result.verdict == Verdict.PICK_CHANGED, result.note


def test_the_baseline_schema_takes_a_race_and_a_share_and_refuses_malformed_ones() -> None:
    def doc(kernel: dict[str, Any]) -> dict[str, Any]:
        return entries_doc({"t.py::test": {**ENTRY, "codegen": {"optimized": [kernel]}}}, SOFTWARE)

    validate(doc({"name": "k", "race": RACE, "share": 0.25}), "f.json")
    for bad in ({"name": "k", "race": "not-hex"}, {"name": "k", "share": 1.5}):
        with pytest.raises(BaselineError):
            validate(doc(bad), "f.json")


RACE_CONFTEST = """
import json, os
import pytest
from speedgate.testing import ScriptedTimer

@pytest.fixture
def speedgate_timer():
    optimized_ms = float(os.environ["OPT_MS"])
    facts = json.loads(os.environ["KERNELS"])
    profile = {"events_ms": optimized_ms, "busy_ms": float(os.environ["BUSY_MS"]), "all_streams_ms": optimized_ms}
    return ScriptedTimer({"reference": 2.0, "optimized": optimized_ms},
                         profiles={"reference": {"events_ms": 2.0, "busy_ms": 2.0, "all_streams_ms": 2.0,
                                                 "kernels": facts["reference"]},
                                   "optimized": {**profile, "kernels": facts["optimized"]}})
"""

def race_project(pytester: pytest.Pytester, entry: Mapping[str, Any]) -> None:
    """A project of one comparison (ONE_COMPARISON, timed by RACE_CONFTEST) whose baseline file holds `entry`,
    calibrated, blessed with this machine's software."""
    from speedgate.hardware import detect

    software = detect("test-box").software
    pytester.makeconftest(RACE_CONFTEST)
    pytester.makepyfile(test_cases=ONE_COMPARISON)
    pytester.makeini("[pytest]\n")
    entry = {**entry, "software": software,
             "calibration": {"runs": 2, "spread": 0.001, "measured_at": "2026-11-28T00:00:00Z"}}
    write_entries(pytester.path, {"test_cases.py::test_gemm": entry}, software)


def gate_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, opt_ms: float, busy_ms: float,
             kernels: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A gate run of race_project's comparison with the optimized side at `opt_ms` (`busy_ms` of it its kernels'),
    launching `kernels`: its report's case and the exit code."""
    monkeypatch.setenv("OPT_MS", str(opt_ms))
    monkeypatch.setenv("BUSY_MS", str(busy_ms))
    monkeypatch.setenv("KERNELS", json.dumps(kernels))
    result = pytester.runpytest("--hardware-key", "test-box", "--speedgate-json", "run.json")
    return json.loads((pytester.path / "run.json").read_text())["cases"][0], int(result.ret)


@pytest.mark.parametrize("opt_ms, busy_ms, facts, verdict, strict_exit", [
    (1.1, 1.1, RACED, "pick-changed", 1),  # the race alone: a pass of the run, red under strict
    (1.2, 1.1, RACED, "regressed", 1),  # the race and 0.1 ms of host work: red either way
])
def test_a_gate_run_names_a_race_and_fails_it_only_under_strict(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                                opt_ms: float, busy_ms: float, facts: dict[str, Any],
                                                                verdict: str, strict_exit: int) -> None:
    race_project(pytester, {**ENTRY, "codegen": BLESSED})
    case, ret = gate_run(pytester, monkeypatch, opt_ms, busy_ms, facts)
    assert case["verdict"] == verdict, case["note"]
    assert ret == (0 if verdict == "pick-changed" else 1)
    assert pytester.runpytest("--hardware-key", "test-box", "--speedgate-strict").ret == strict_exit


def test_facts_only_evidence_gives_an_entry_its_kernels_races_and_shares_and_moves_no_tolerance(tmp_path) -> None:
    """An entry blessed before races and shares were recorded, completed from a gate run of the same kernels
    (`python -m speedgate evidence FILE REPORT --facts-only`): its facts gain both, its evidence and tolerance stay."""
    from speedgate import evidence
    from speedgate.evidence_cli import main

    def bare(facts: dict[str, Any]) -> dict[str, Any]:
        return {side: [{k: v for k, v in kernel.items() if k not in ("race", "share")} for kernel in kernels_]
                for side, kernels_ in facts.items()}

    calibration = evidence.add_process({}, "card-a", 2.0, 0.001, "2026-11-26T00:00:00Z")
    calibration = evidence.add_process(calibration, "card-b", 2.02, 0.001, "2026-11-26T00:00:00Z")
    calibration.update(runs=2, spread=0.001, measured_at="2026-11-26T00:00:00Z")
    entry = {**ENTRY, "codegen": bare(BLESSED), "calibration": calibration, "tolerance": evidence.tolerance_of(calibration)}
    doc = entries_doc({"t.py::test": entry}, SOFTWARE)
    run = {"speedgate_report_version": 1, "run_time": "2026-11-28T00:00:00Z",
           "fingerprints": {"test-box": {"software": SOFTWARE}},
           "cases": [{"case_id": "t.py::test", "nodeid": "t.py::test", "hardware_key": "test-box", "timed": True,
                      "speedup": 1.9, "reference_ms": 1.9, "optimized_ms": 1.0, "timer": "scripted",
                      "verdict": "pass", "card": "card-c", "codegen": BLESSED}]}
    after, lines, notes = evidence.add_reports(doc, [run], facts_only=True)
    completed = after["cases"]["t.py::test"]
    assert completed["codegen"] == BLESSED and lines == []
    assert completed["calibration"] == calibration and completed["tolerance"] == entry["tolerance"]
    # Without it, the same report's speedup joins the evidence too.
    assert evidence.add_reports(doc, [run])[0]["cases"]["t.py::test"]["calibration"] != calibration
    # The command: facts only from the reports, and a usage error without any.
    (tmp_path / "f.json").write_text(json.dumps(doc))
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert main([str(tmp_path / "f.json"), str(tmp_path / "run.json"), "--facts-only"]) == 0
    written = json.loads((tmp_path / "f.json").read_text())["cases"]["t.py::test"]
    assert written["codegen"] == BLESSED and written["tolerance"] == entry["tolerance"]
    with pytest.raises(SystemExit) as usage:
        main([str(tmp_path / "f.json"), "--facts-only"])
    assert usage.value.code == 2


def test_a_bless_is_not_rewritten_by_shares_alone_and_a_kept_entry_gains_the_facts_it_lacked() -> None:
    """A kernel's share moves a little from run to run: a bless of the same kernels that moved its speedup less than
    the rewrite fraction keeps the entry (no ratchet by noise), and gives it the races and shares it lacked. Kernels
    that differ in an exact fact rewrite it, as other kernels always did."""
    from speedgate import baseline

    def bare(facts: dict[str, Any]) -> dict[str, Any]:
        return {side: [{k: v for k, v in kernel.items() if k not in ("race", "share")} for kernel in kernels_]
                for side, kernels_ in facts.items()}

    fingerprint = {"hardware": {"kind": "cpu", "name": "x"}, "software": SOFTWARE}
    noisier = {side: [{**kernel, "share": round(kernel["share"] * 1.01, 4)} for kernel in facts]
               for side, facts in BLESSED.items()}

    def bless(old_facts: dict[str, Any], new_facts: dict[str, Any]) -> tuple[dict[str, Any], str]:
        existing = {"schema_version": 1, "hardware_key": "test-box", "fingerprint": fingerprint,
                    "cases": {"t.py::test": {**ENTRY, "codegen": old_facts}}}
        doc, changes = baseline.merge(existing, hardware_key="test-box", fingerprint=fingerprint,
                                      entries={"t.py::test": {**ENTRY, "speedup": 2.01, "codegen": new_facts}},
                                      rewrite_fraction={"t.py::test": 0.02 / 3})
        return doc["cases"]["t.py::test"], changes[0].action

    entry, action = bless(BLESSED, noisier)
    assert action == "kept" and entry["speedup"] == 2.0 and entry["codegen"] == BLESSED
    entry, action = bless(bare(BLESSED), BLESSED)
    assert action == "kept" and entry["speedup"] == 2.0 and entry["codegen"] == BLESSED
    entry, action = bless(BLESSED, RACED)  # another config: exact facts differ
    assert action == "updated" and entry["codegen"] == RACED


# -- kernels of no pick: judged against the pick they are nearest to ------------------------------------------------
# reduce-overhead's optimized side in the H200 file: cuBLAS's GEMMs and inductor's GELU, blessed at 1.109x with the
# GELU at 8 warps (the main pick) and at 1.156x with it at 4 warps (another pick). The sixteenth study's +5% run drew
# the other pick and a spin kernel beside it: no pick matched, the main pick judged it, and it passed.

def reduce_overhead(warps: int, *, spin: float = 0.0, copy: dict[str, Any] | None = None,
                    shares: bool = True) -> dict[str, Any]:
    gelu = {"name": "triton_poi_fused_gelu_2", "grid": [65536 if warps == 8 else 32768, 1, 1],
            "block": [32 * warps, 1, 1], "warps": warps, "registers": 19 if warps == 8 else 31, "race": RACE}
    optimized = [*([{"name": "spin_kernel", "share": spin}] if spin else []),
                 {"name": "nvjet_gemm", "grid": [2, 66, 1], "registers": 168, "share": round(0.80 * (1 - spin), 4)},
                 {**gelu, "share": round(0.14 * (1 - spin), 4)},
                 {"name": "triton_poi_fused__to_copy_3", "grid": [512, 1, 1], "share": round(0.06 * (1 - spin), 4),
                  **(copy or {})}]
    if not shares:
        optimized = [{k: v for k, v in kernel.items() if k != "share"} for kernel in optimized]
    return {"reference": REFERENCE, "optimized": optimized}


def two_picks(tolerance: float = 0.02) -> dict[str, Any]:
    other = {"codegen": reduce_overhead(4), "speedup": 1.156, "reference_ms": 2.0, "optimized_ms": 1.7301,
             "tolerance": tolerance, "measured_at": "2026-11-27T12:00:00Z"}
    return {**ENTRY, "speedup": 1.109, "optimized_ms": 1.8034, "ci_low": 1.107, "ci_high": 1.111,
            "tolerance": tolerance, "codegen": reduce_overhead(8), "picks": [other]}


def test_new_work_on_another_pick_is_judged_against_that_pick_not_a_slower_main_pick() -> None:
    from speedgate import picks

    slowed = reduce_overhead(4, spin=0.05)  # the faster pick's kernels and a spin of 5% of its time
    index, pick, apart, from_main = picks.nearest(two_picks(), slowed) or (None, {}, 0.0, 0.0)
    assert index == 0 and pick["speedup"] == 1.156
    assert apart == pytest.approx(0.05) and from_main == pytest.approx(0.05 + 0.133)
    entry, note = picks.judged_entry(two_picks(), slowed)
    assert entry is not None and entry["speedup"] == 1.156 and note is not None
    assert note.startswith("judged against the entry's other pick 1 (the nearest to this run's kernels: those that "
                           "differ from it take 5.0% of the run's kernel time, from the main pick 18.3%")
    m = measured(2.0 / (1.7301 * 1.05))  # 1.101x: inside the main pick's band, 4.8% under the other pick's
    result = judged(m, slowed, entry=entry)
    assert result.verdict == Verdict.REGRESSED, result.note
    assert "optimized side launches more kernels than blessed: +spin_kernel" in result.note
    # Judged against the main pick, as before, the slowdown passed: the hole the nearest pick closes.
    assert judged(m, slowed, entry=two_picks() | {"picks": []}).verdict == Verdict.PASS


def test_picks_set_apart_by_less_than_the_tolerance_of_the_time_leave_the_main_pick() -> None:
    """The training step's picks differ in copies at another grid, a fraction of a percent of the side's kernel time:
    their speedups differ by the cards that blessed them. A run nearer one of them by less than the entry's tolerance
    of its kernel time is judged against the main pick, not whichever pick a copy's grid happens to match."""
    from speedgate import picks

    entry = two_picks()
    entry["picks"] = [{**entry["picks"][0], "codegen": reduce_overhead(8, copy={"grid": [256, 1, 1]})}]
    def run(copy_share: float) -> dict[str, Any]:  # the pick's copy, and a little new work: no pick's kernels
        kernels = reduce_overhead(8, copy={"grid": [256, 1, 1], "share": copy_share})
        return {**kernels, "optimized": [*kernels["optimized"], {"name": "_tail", "share": 0.001}]}

    assert codegen.differing(entry["picks"][0]["codegen"], run(0.003)) == pytest.approx(0.001)
    assert codegen.differing(entry["codegen"], run(0.003)) == pytest.approx(0.004)
    assert picks.nearest(entry, run(0.003)) is None and picks.judged_entry(entry, run(0.003)) == (entry, None)
    # Set apart by more than the tolerance (the copy 3% of the time), the pick is the nearer.
    assert picks.nearest(entry, run(0.03)) is not None


def test_a_run_without_shares_is_judged_against_the_main_pick() -> None:
    from speedgate import picks

    run = reduce_overhead(4, spin=0.05, shares=False)
    assert codegen.differing(two_picks()["codegen"], run) is None
    assert picks.nearest(two_picks(), run) is None and picks.judged_entry(two_picks(), run)[1] is None


def test_the_kernel_time_that_differs_weighs_each_kernel_by_its_share() -> None:
    """Rung 4's raced run: its big reduction at the config of one pick, a small one at another's. It is nearer the
    pick whose differing kernel is the small one, whichever number of kernels differ."""
    pick = reduce_overhead(8)
    run = reduce_overhead(4)
    assert codegen.differing(pick, run) == pytest.approx(0.14)  # the GELU, its share in the run
    gone = {"reference": REFERENCE, "optimized": [*pick["optimized"], {"name": "_tail", "share": 0.02}]}
    assert codegen.differing(gone, run) == pytest.approx(0.16)  # a kernel the run did not launch: the pick's share
    assert codegen.differing(run, run) == 0.0
    edited = reduce_overhead(4)
    edited["optimized"][1] = {**edited["optimized"][1], "race": "f" * 16}  # the GELU's source changed
    assert codegen.differing(run, edited) == pytest.approx(0.14)


def test_a_gate_run_judges_new_work_on_a_faster_pick_against_that_pick(pytester: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    race_project(pytester, two_picks())
    case, ret = gate_run(pytester, monkeypatch, 1.7301 * 1.05, 1.7301 * 1.05, reduce_overhead(4, spin=0.05))
    assert case["verdict"] == "regressed" and ret == 1, case["note"]
    assert "judged against the entry's other pick 1 (the nearest to this run's kernels" in case["note"]
    # The other pick's own kernels, unslowed: judged against it, a pass.
    case, ret = gate_run(pytester, monkeypatch, 1.7301, 1.7301, reduce_overhead(4))
    assert case["verdict"] == "pass" and ret == 0, case["note"]
    assert "its kernels are this run's" in case["note"]
