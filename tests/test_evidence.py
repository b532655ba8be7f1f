"""Calibration across cards: every process's speedup kept with the card that measured it, the tolerance covering the
spread between cards, gate runs' reports added as evidence, and nothing lost or overwritten on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import baseline_doc
from speedgate import evidence
from speedgate.baseline import validate
from speedgate.blessing import bless, summary
from speedgate.results import CompareResult
from speedgate.stats import RatioEstimate
from speedgate.verdict import Verdict, judge

CASE = "perftests/test_triton_mlp.py::test_fused_mlp_block::vs_eager"


def calibrated(speedup: float, card: str | None, spread: float = 0.006) -> CompareResult:
    return CompareResult(case_id=CASE, nodeid=CASE.rpartition("::")[0], name="vs_eager", hardware_key="gpu-x",
                         timed=True, verdict=Verdict.NEW, note="", tolerance=0.1, speedup=speedup, reference_ms=2.2,
                         optimized_ms=2.2 / speedup, ci_low=speedup * 0.999, ci_high=speedup * 1.001, rounds=30, noise=0.001,
                         reference_cv=0.01, optimized_cv=0.01,
                         timer="cuda-events-held", calibration_runs=3, calibration_spread=spread, card=card)


def bless_one(existing: dict[str, Any] | None, result: CompareResult) -> dict[str, Any]:
    doc, _ = bless(existing, hardware_key="gpu-x", fingerprint={"hardware": {"kind": "gpu", "name": "GPU X"},
                                                                 "software": {"torch": "2.11"}},
                   cases=[result], metrics=[], measured_at="2026-11-24T00:00:00Z")
    validate(doc, Path("gpu-x.json"))
    return doc


def test_a_second_card_adds_to_the_evidence_and_its_spread_widens_the_tolerance() -> None:
    # The case: calibrated at the floor from two processes on one card (1.348x, 1.346x); another card read
    # 1.303x, 3.3% below, and failed the gate at that floor.
    doc = bless_one(None, calibrated(1.348, "card-a"))
    doc = bless_one(doc, calibrated(1.346, "card-a"))
    entry = doc["cases"][CASE]
    assert entry["tolerance"] == evidence.CALIBRATION_FLOOR
    floor_verdict = judge(RatioEstimate(1.303, 1.301, 1.309, 0.95, 30), entry["speedup"], entry["tolerance"], file_found=True)
    assert floor_verdict.verdict == Verdict.REGRESSED
    doc = bless_one(doc, calibrated(1.303, "card-b"))
    entry = doc["cases"][CASE]
    machines = entry["calibration"]["machines"]
    assert machines["card-a"]["speedups"] == [1.348, 1.346] and machines["card-b"]["speedups"] == [1.303]
    assert entry["calibration"]["process_speedups"] == [1.348, 1.346, 1.303]
    assert entry["calibration"]["machine_spread"] > 0.015  # the spread between the two cards' medians, reported
    assert entry["tolerance"] > 0.034  # now covers the other card
    verdict = judge(RatioEstimate(1.303, 1.301, 1.309, 0.95, 30), 1.348, entry["tolerance"], file_found=True)
    assert verdict.verdict == Verdict.PASS


def test_evidence_from_before_cards_were_recorded_is_kept_as_unrecorded() -> None:
    old = {"measured_at": "2026-11-23T18:59:13Z", "process_speedups": [1.348, 1.346], "process_spread": 0.001316,
           "runs": 3, "spread": 0.005866}
    new = evidence.add_process(old, "card-b", 1.303, None, "2026-11-24T00:00:00Z")
    assert new["machines"][evidence.UNRECORDED]["speedups"] == [1.348, 1.346]
    assert new["machines"][evidence.UNRECORDED]["run_spreads"] == [0.005866]
    assert new["process_speedups"] == [1.348, 1.346, 1.303]
    assert evidence.card_count(new) == 1 and "machine_spread" not in new  # one recorded card: no between-card spread
    assert evidence.tolerance_of(new) == pytest.approx(3 * evidence.between_run_spread([1.348, 1.346, 1.303]), rel=1e-3)


def test_a_bless_whose_process_aged_out_no_longer_sets_the_tolerance() -> None:
    """The H200 file, 2026-11-28: Gluon flash attention 8192-128-causal `vs_sdpa` was blessed on a card whose two
    runs read 1.6% apart; once that card aged out of the newest eight, no kept process had an in-process spread, and
    the bless's own spread came back through the fallback: 4.9%, over eight cards that read 1.074-1.095x (0.69%)."""
    calibration: dict[str, Any] = evidence.add_process({}, "blessing-card", 1.08, 0.01621, "2026-11-27T11:42:57Z")
    calibration.update(runs=2, spread=0.01621, measured_at="2026-11-27T11:42:57Z")
    readings = [1.074, 1.076, 1.076, 1.075, 1.095, 1.075, 1.092, 1.081]
    for i, speedup in enumerate(readings):
        calibration = evidence.add_process(calibration, f"card-{i}", speedup, None, f"2026-11-28T00:{i:02d}:00Z")
    assert "blessing-card" not in calibration["machines"] and calibration["spread"] == 0.01621
    pooled = evidence.calibrated_tolerance(calibration["process_spread"])
    assert evidence.tolerance_of(calibration) == pytest.approx(pooled, rel=1e-3)
    assert evidence.tolerance_of(calibration) < 0.025
    # While the evidence cannot show a spread (one process, or cards never recorded), the bless's stands.
    one = evidence.add_process({}, "card-a", 1.08, None, "2026-11-28T00:00:00Z") | {"spread": 0.01621}
    assert evidence.tolerance_of(one) == pytest.approx(3 * 0.01621, rel=1e-3)
    legacy = {"process_speedups": [1.08, 1.081], "process_spread": 0.001, "runs": 2, "spread": 0.01621}
    assert evidence.tolerance_of(legacy) == pytest.approx(3 * 0.01621, rel=1e-3)


def test_each_card_keeps_its_newest_processes_and_the_newest_cards() -> None:
    calibration: dict[str, Any] = {}
    for i in range(12):
        calibration = evidence.add_process(calibration, "card-a", 1.0 + i / 1000, 0.001, f"2026-11-24T00:{i:02d}:00Z")
    assert calibration["machines"]["card-a"]["speedups"] == [1.0 + i / 1000 for i in range(12 - evidence.PROCESSES_KEPT, 12)]
    for i in range(12):
        calibration = evidence.add_process(calibration, f"card-{i}", 1.0, None, f"2026-11-25T00:{i:02d}:00Z")
    assert len(calibration["machines"]) == evidence.CARDS_KEPT and "card-11" in calibration["machines"]


def test_a_card_whose_evidence_ages_out_is_named_by_the_evidence_command_and_by_a_bless(tmp_path: Path) -> None:
    """A file keeps the newest CARDS_KEPT cards' evidence: the oldest card's processes leave when another card comes,
    and with them what they set (on the H200, 2026-11-27: one process's 2.8% spread had set a tolerance of 8.4%).
    Whoever adds the newer evidence is told which card left, never silently."""
    fingerprint = {"hardware": {"kind": "gpu", "name": "GPU X"}, "software": {"torch": "2.11"}}
    doc: dict[str, Any] | None = None
    for i, card in enumerate(["card-old", *(f"card-{i}" for i in range(1, evidence.CARDS_KEPT))]):
        doc, _ = bless(doc, hardware_key="gpu-x", fingerprint=fingerprint, metrics=[],
                       cases=[calibrated(1.30 if i == 0 else 1.31, card, spread=0.03 if i == 0 else 0.006)],
                       measured_at=f"2026-11-24T00:0{i}:00Z")
    assert doc is not None
    assert len(doc["cases"][CASE]["calibration"]["machines"]) == evidence.CARDS_KEPT
    assert doc["cases"][CASE]["tolerance"] == pytest.approx(0.09)  # the old card's in-process spread, x3
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    done = evidence_cli(path, report(tmp_path, "run.json", 1.31, "card-new"))
    assert done.returncode == 0, done.stderr
    assert ("card card-old's evidence aged out of 1 entry (a file keeps the 8 cards with the newest evidence): its "
            "processes no longer set their tolerances or centers") in done.stdout
    assert f"{CASE}: tolerance 9.0% -> " in done.stdout
    after = json.loads(path.read_text())["cases"][CASE]["calibration"]["machines"]
    assert "card-old" not in after and "card-new" in after
    # A calibrating bless on a ninth card says the same of the card it pushes out.
    blessed, changes = bless(doc, hardware_key="gpu-x", fingerprint=fingerprint, cases=[calibrated(1.32, "card-9")],
                             metrics=[], measured_at="2026-11-25T00:00:00Z")
    lines = summary(path, blessed, changes, before=doc)
    assert any("the evidence of card card-old aged out" in line for line in lines), lines
    assert not any("aged out" in line for line in summary(path, blessed, changes)), "said without the file before"


def report(tmp_path: Path, name: str, speedup: float, card: str, software: dict[str, str] | None = None,
           timer: str = "cuda-events-held", key: str = "gpu-x", **fields: Any) -> Path:
    """A gate run's report of CASE (fields: more of its record) and of an uncalibrated case."""
    doc = {"speedgate_report_version": 1, "run_time": "2026-11-24T12:00:00Z",
           "fingerprints": {key: {"hardware": {}, "software": software or {"torch": "2.11"}}},
           "cases": [{"case_id": CASE, "timed": True, "speedup": speedup, "timer": timer, "card": card,
                      "hardware_key": key, "verdict": "pass", "test_failed": False, **fields},
                     {"case_id": "uncalibrated::case", "timed": True, "speedup": 2.0, "timer": timer, "card": card,
                      "hardware_key": key, "verdict": "pass", "test_failed": False}]}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_gate_runs_add_evidence_through_the_command_line(tmp_path: Path) -> None:
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    doc["cases"]["uncalibrated::case"] = baseline_doc({"uncalibrated::case": 2.0}, key="gpu-x")["cases"]["uncalibrated::case"]
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    runs = [report(tmp_path, "run-1.json", 1.303, "card-b"), report(tmp_path, "run-2.json", 1.306, "card-b"),
            report(tmp_path, "other-torch.json", 1.1, "card-c", software={"torch": "2.12"}),
            report(tmp_path, "other-timer.json", 1.1, "card-c", timer="cuda-events-idle-start")]
    done = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path), *map(str, runs)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"{CASE}: tolerance 2.0% -> " in done.stdout
    after = json.loads(path.read_text())
    entry = after["cases"][CASE]
    assert entry["calibration"]["machines"]["card-b"]["speedups"] == [1.303, 1.306]
    assert "card-c" not in entry["calibration"]["machines"]  # other software, other timer: not this entry's evidence
    assert ("left out: 1 case(s) whose entry was blessed with other software (torch 2.11 in the file, 2.12 in the "
            "report)") in done.stdout  # said, not silently skipped
    assert f"left out: {CASE}: timed by cuda-events-idle-start, the entry by cuda-events-held" in done.stdout
    assert after["cases"]["uncalibrated::case"] == doc["cases"]["uncalibrated::case"]  # no calibration: untouched
    shown = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path)], capture_output=True, text=True,
                           check=True).stdout
    assert "card card-b: 1.303, 1.306" in shown and "between cards" in shown


def evidence_cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speedgate", "evidence", *map(str, args)], capture_output=True,
                          text=True, check=False)


def test_case_adds_the_reports_evidence_of_the_named_entry_only(tmp_path: Path) -> None:
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    other = "perftests/test_other.py::test_x::vs_y"
    doc["cases"][other] = {**doc["cases"][CASE]}
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    run = report(tmp_path, "run.json", 1.30, "card-b")
    run_doc = json.loads(run.read_text())
    run_doc["cases"].append({**run_doc["cases"][0], "case_id": other})
    run.write_text(json.dumps(run_doc))
    done = evidence_cli(path, run, "--case", CASE)
    assert done.returncode == 0, done.stderr
    after = json.loads(path.read_text())
    assert "card-b" in after["cases"][CASE]["calibration"]["machines"]
    assert after["cases"][other] == doc["cases"][other]  # in the report, not named: left as it was
    # The same report again for its other cases: known as held for the case it gave already, added for the other.
    done = evidence_cli(path, run)
    assert done.returncode == 0 and "left out: 1 case(s) of report" in done.stdout, done.stdout
    after = json.loads(path.read_text())
    assert after["cases"][CASE]["calibration"]["machines"]["card-b"]["speedups"] == [1.3]
    assert after["cases"][other]["calibration"]["machines"]["card-b"]["speedups"] == [1.3]
    before = path.read_text()
    for args, says in (([run, "--case", "no::such::case"], "no report measured no::such::case"),
                       (["--case", CASE], "--case names the entries whose evidence the reports add")):
        refused = evidence_cli(path, *args)
        assert refused.returncode == 2 and says in refused.stderr
    assert path.read_text() == before


def test_restart_starts_an_entrys_evidence_again_from_its_newest_bless(tmp_path: Path) -> None:
    """A case whose code changed, blessed again with calibration: the bless adds the new code's process to the old
    code's evidence, whose spread then sets the tolerance. --restart keeps the newest bless's process alone."""
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    doc = bless_one(doc, calibrated(1.612, "card-b", spread=0.004))  # the new code, on another card
    doc["cases"]["uncalibrated::case"] = baseline_doc({"uncalibrated::case": 2.0}, key="gpu-x")["cases"]["uncalibrated::case"]
    wide = doc["cases"][CASE]["tolerance"]
    assert wide > 0.2  # the old code's 1.35x beside the new code's 1.61x
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    done = evidence_cli(path, "--restart", CASE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"{CASE}: evidence restarted from its bless on card card-b (1.612x): tolerance "
                                   f"{wide:.1%} -> 2.0%")
    after = json.loads(path.read_text())
    entry = after["cases"][CASE]
    assert entry["calibration"]["machines"] == {"card-b": {"measured_at": "2026-11-24T00:00:00Z",
                                                           "run_spreads": [0.004], "speedups": [1.612],
                                                           "blessed": ["2026-11-24T00:00:00Z"]}}
    assert entry["tolerance"] == evidence.CALIBRATION_FLOOR and entry["speedup"] == 1.612 and "picks" not in entry
    assert after["cases"]["uncalibrated::case"] == doc["cases"]["uncalibrated::case"]
    validate(after, path)
    # The next calibrating bless of the new code adds to the new evidence only.
    again = bless_one(after, calibrated(1.60, "card-c"))["cases"][CASE]["calibration"]["machines"]
    assert sorted(again) == ["card-b", "card-c"]


def test_restart_refuses_what_it_cannot_do_and_writes_nothing(tmp_path: Path) -> None:
    doc = bless_one(None, calibrated(1.348, "card-a"))
    doc["cases"]["uncalibrated::case"] = baseline_doc({"uncalibrated::case": 2.0}, key="gpu-x")["cases"]["uncalibrated::case"]
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    before = path.read_bytes()
    for args, said in (
            (["--restart", "no::such::case"], "no::such::case: no such entry in the file"),
            (["--restart", CASE, "--restart", "uncalibrated::case"],
             "uncalibrated::case: cannot restart its evidence: it has no calibrated evidence"),
            ([report(tmp_path, "run.json", 1.3, "card-b"), "--restart", CASE, "--case", CASE],
             "--restart takes the restarted entries' runs alone")):
        done = evidence_cli(path, *args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
        assert path.read_bytes() == before  # the first, restartable entry was not written either
    # A gate run of the blessing card after the bless: the bless recorded its time with the card's evidence, so the
    # restart still finds it, and keeps it alone.
    assert evidence_cli(path, report(tmp_path, "same-card.json", 1.35, "card-a")).returncode == 0
    gated = path.read_bytes()
    assert json.loads(gated)["cases"][CASE]["calibration"]["machines"]["card-a"]["speedups"] == [1.348, 1.35]
    done = evidence_cli(path, "--restart", CASE)
    assert done.returncode == 0, done.stderr
    assert json.loads(path.read_text())["cases"][CASE]["calibration"]["machines"]["card-a"]["speedups"] == [1.348]
    # In a file an earlier speedgate blessed (no bless time recorded), the gate run's newer evidence hides the bless.
    older = json.loads(gated)
    del older["cases"][CASE]["calibration"]["machines"]["card-a"]["blessed"]
    path.write_text(json.dumps(older))
    before = path.read_bytes()
    done = evidence_cli(path, "--restart", CASE)
    assert done.returncode == 2 and "a gate run's report came after it" in done.stderr, done.stderr
    assert path.read_bytes() == before
    assert "--restart CASE_ID" in evidence_cli("--help").stdout
    # A corrupt file: said, and left as it was.
    path.write_text('{"cases": {')
    done = evidence_cli(path, "--restart", CASE)
    assert done.returncode == 2 and "is not valid JSON" in done.stderr and "left untouched" in done.stderr, done.stderr
    assert path.read_text() == '{"cases": {'


def test_restart_from_gate_runs_of_the_new_code_where_the_bless_cannot_be_told_apart(tmp_path: Path) -> None:
    """An entry some of whose cards were measured another way than the code measures now (the H200 file's flash
    attention `vs_compile`: the old timer cut some processes' batches into pieces; docs/results/gate-study-h200.md,
    the twenty-fifth study), in a file whose bless's process cannot be told apart, so that --restart alone refuses.
    With reports, --restart keeps those runs alone, whatever order the command line gives them in, and leaves the
    reports' other entries as they were; runs of fewer than two of the entry's cards are refused, nothing written."""
    doc = bless_one(None, calibrated(6.231, "card-a"))
    other = "uncalibrated::case"  # the reports' second case: calibrated in this file, not restarted
    doc["cases"][other] = json.loads(json.dumps(doc["cases"][CASE]))
    calibration = doc["cases"][CASE]["calibration"]
    del calibration["machines"]["card-a"]["blessed"]  # an earlier speedgate recorded no bless time
    for i, speedup in enumerate([6.021, 6.244, 6.027, 6.199]):  # old evidence, two cards cut by the timer
        calibration = evidence.add_process(calibration, f"old-{i}", speedup, None, f"2026-11-25T00:0{i}:00Z")
    doc["cases"][CASE] = {**doc["cases"][CASE], "calibration": calibration,
                          "tolerance": evidence.tolerance_of(calibration)}
    wide = doc["cases"][CASE]["tolerance"]
    assert wide > 0.03
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    one_card = [report(tmp_path, f"new-{i}.json", speedup, "new-a") for i, speedup in enumerate([6.19, 6.20])]
    before = path.read_bytes()
    done = evidence_cli(path, "--restart", CASE, *one_card)
    assert done.returncode == 2 and "the file takes 2 of their runs of it, on 1 recorded card(s)" in done.stderr, \
        done.stderr
    assert path.read_bytes() == before
    runs = [*one_card, report(tmp_path, "new-b.json", 6.23, "new-b"), report(tmp_path, "new-c.json", 6.18, "new-c")]
    done = evidence_cli(path, "--restart", CASE, *runs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (f"{CASE}: evidence restarted from 4 gate run(s) on 3 cards: tolerance "
                                           f"{wide:.1%} -> 2.0%")
    after = json.loads(path.read_text())
    entry = after["cases"][CASE]
    assert sorted(entry["calibration"]["machines"]) == ["new-a", "new-b", "new-c"]
    assert entry["calibration"]["process_speedups"] == [6.19, 6.2, 6.23, 6.18]
    assert entry["calibration"]["spread"] == calibration["spread"] and entry["speedup"] == 6.231
    assert entry["tolerance"] == evidence.CALIBRATION_FLOOR
    assert evidence.judged_against(entry, entry["tolerance"]) == (6.195, 3)  # the new cards' center
    assert after["cases"][other] == doc["cases"][other]
    validate(after, path)
    # The same reports again: already held for the restarted entry, and nothing moves there; added for the other.
    again = evidence_cli(path, *runs)
    assert again.returncode == 0 and "already in this file's evidence" in again.stdout, again.stdout
    again_doc = json.loads(path.read_text())
    assert again_doc["cases"][CASE] == entry and "new-b" in again_doc["cases"][other]["calibration"]["machines"]


def test_a_report_given_twice_is_added_once(tmp_path: Path) -> None:
    """The same gate run's report given again (in the same command or a later one) added its speedups a second time:
    one process counted twice, and the tolerance recomputed from it. It is left out, and said so."""
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    run = report(tmp_path, "run.json", 1.303, "card-b")
    evidence = [sys.executable, "-m", "speedgate", "evidence", str(path)]
    first = subprocess.run([*evidence, str(run), str(run)], capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    once = json.loads(path.read_text())
    assert once["cases"][CASE]["calibration"]["machines"]["card-b"]["speedups"] == [1.303]
    assert "already in this file's evidence" in first.stdout
    again = subprocess.run([*evidence, str(run)], capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert "0 tolerance(s) changed" in again.stdout and "already in this file's evidence" in again.stdout
    assert json.loads(path.read_text())["cases"] == once["cases"]
    other = report(tmp_path, "other-run.json", 1.305, "card-b")  # another run of the same card is evidence
    subprocess.run([*evidence, str(other)], capture_output=True, text=True, check=True)
    assert json.loads(path.read_text())["cases"][CASE]["calibration"]["machines"]["card-b"]["speedups"] == [1.303, 1.305]


def test_a_gate_studys_slowed_run_is_not_evidence(tmp_path: Path) -> None:
    """A study's OUT folder holds its slowed runs' reports beside its clean ones. Given to `evidence`, a run whose
    optimized sides were slowed by 10% added its speedups to the file and widened a tolerance from 4.0% to 16.3% (tried
    in a fresh project, 2026-11-28). A report the study stamped, or one with a study's spins file beside it (an older
    study's), is left out and said; the file is not touched."""
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    before = path.read_text()
    stamped = report(tmp_path, "slow0.1-0.json", 1.2, "card-b")
    stamped.write_text(json.dumps({**json.loads(stamped.read_text()), "settings": {"study_slowdown": 0.1}}))
    older = report(tmp_path, "slow0.05-0.json", 1.28, "card-c")
    (tmp_path / "slow0.05-0.spins.jsonl").write_text('{"case_id": "x", "share": 0.05}\n')
    done = evidence_cli(path, stamped, older)
    assert done.returncode == 0, done.stderr
    assert "slowed by 10% (speedgate study)" in done.stdout
    assert "slowed by the share in slow0.05-0.spins.jsonl (speedgate study)" in done.stdout
    assert "0 tolerance(s) changed" in done.stdout
    assert json.loads(path.read_text())["cases"] == json.loads(before)["cases"]
    clean = report(tmp_path, "clean0.json", 1.303, "card-b")  # the same study's clean run is evidence
    assert evidence_cli(path, clean).returncode == 0
    assert json.loads(path.read_text())["cases"][CASE]["calibration"]["machines"]["card-b"]["speedups"] == [1.303]


def test_a_report_of_another_kind_of_machine_is_not_evidence(tmp_path: Path) -> None:
    """The same case measured on another hardware key (an H200's gate run given to the H100's file, the same torch
    and timer) would widen this file's tolerance with another machine's speed: it is left out, and said so."""
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    before = json.loads(path.read_text())["cases"][CASE]
    other = report(tmp_path, "other-kind.json", 1.9, "card-h200", key="gpu-y")
    done = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path), str(other)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "left out: 2 case(s) measured on hardware key gpu-y, not this file's gpu-x" in done.stdout
    assert "0 tolerance(s) changed" in done.stdout
    entry = json.loads(path.read_text())["cases"][CASE]
    assert entry["calibration"] == before["calibration"] and entry["tolerance"] == before["tolerance"]


def test_a_run_of_another_config_is_not_the_entrys_evidence(tmp_path: Path) -> None:
    """A gate run whose autotuner ran another config than the entry recorded measured another kernel (on the H100,
    2026-11-26: the persistent matmul at the LLM shape ran 256x128 tiles where the entry's 128x256 were blessed,
    11% slower): its speedup is left out, and said so; a run of the entry's config is added."""
    doc = bless_one(None, calibrated(1.348, "card-a"))
    doc = bless_one(doc, calibrated(1.346, "card-a"))
    doc["cases"][CASE]["config"] = {"BLOCK_M": 128, "BLOCK_N": 256}
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    runs = [str(report(tmp_path, name, speedup, "card-b", config=config, nodeid=CASE.rpartition("::")[0]))
            for name, speedup, config in [("other.json", 1.2, {"BLOCK_M": 256, "BLOCK_N": 128}),
                                          ("same.json", 1.34, {"BLOCK_M": 128, "BLOCK_N": 256})]]
    done = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path), *runs],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"left out: {CASE}: its test ran another config than the file recorded (another kernel)" in done.stdout
    entry = json.loads(path.read_text())["cases"][CASE]
    assert entry["calibration"]["machines"]["card-b"]["speedups"] == [1.34]


def test_a_measurement_that_never_settled_is_not_evidence(tmp_path: Path) -> None:
    """A gate run whose comparison was still drifting when its rounds ended (settled: false; on the H100 of
    2026-11-26, regional compilation read 0.90x against 0.68x so) would widen the tolerance with no speed of the
    kernel's: it is left out, and said so; a settled run of the same card is added."""
    doc = bless_one(bless_one(None, calibrated(1.348, "card-a")), calibrated(1.346, "card-a"))
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    runs = [str(report(tmp_path, name, speedup, "card-b", settled=settled))
            for name, speedup, settled in [("drifting.json", 1.8, False), ("settled.json", 1.34, True)]]
    done = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path), *runs],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"left out: {CASE}: its measurement never settled" in done.stdout
    assert json.loads(path.read_text())["cases"][CASE]["calibration"]["machines"]["card-b"]["speedups"] == [1.34]


def test_a_bad_report_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(baseline_doc({CASE: 1.3}, key="gpu-x")))
    before = path.read_bytes()
    broken = tmp_path / "broken.json"
    broken.write_text('{"speedgate_report_version": 1, "cases": [')
    done = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path), str(broken)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "broken.json: cannot be read as JSON" in done.stderr
    assert path.read_bytes() == before


def test_a_calibrating_runs_report_adds_its_in_process_spread(tmp_path: Path) -> None:
    """Two calibrating processes that blessed two copies of the file (two runners, or a checkout reset between
    them): the second file takes the first one's report, and its in-process spread counts as its own file's would."""
    doc = bless_one(None, calibrated(1.348, "card-a", spread=0.004))
    path = tmp_path / "gpu-x.json"
    path.write_text(json.dumps(doc))
    first = report(tmp_path, "bless-1.json", 1.346, "card-a")
    data = json.loads(first.read_text())
    data["cases"][0].update(calibration_runs=3, calibration_spread=0.02)
    first.write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "speedgate", "evidence", str(path), str(first)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    entry = json.loads(path.read_text())["cases"][CASE]
    assert entry["calibration"]["machines"]["card-a"]["speedups"] == [1.348, 1.346]
    assert entry["calibration"]["machines"]["card-a"]["run_spreads"] == [0.004, 0.02]
    assert entry["tolerance"] == pytest.approx(0.06)  # 3 x the wider in-process spread (the processes differ by 0.15%)


def test_the_gate_judges_against_the_kinds_center_not_the_one_card_that_blessed() -> None:
    # The H100 file's cutlass_fp8_matmul[8192]::vs_triton: blessed 1.211x on one card; four more cards read
    # 1.26-1.32x. Judged against the bless, a drop of 14% on a typical card (1.30x -> 1.118x) read -7.7%, within the
    # band that the cards' spread gives (11%), and passed.
    entry = bless_one(None, calibrated(1.211, "card-a"))["cases"][CASE]
    calibration = entry["calibration"]
    for card, speedup in (("card-b", 1.262), ("card-c", 1.270), ("card-d", 1.314), ("card-e", 1.321)):
        calibration = evidence.add_process(calibration, card, speedup, None, "2026-11-25T00:00:00Z")  # gate runs' reports
    entry = {**entry, "calibration": calibration, "tolerance": evidence.tolerance_of(calibration)}
    assert evidence.center_of(entry["calibration"]) == (1.27, 5)
    baseline, cards = evidence.judged_against(entry, entry["tolerance"])
    assert (baseline, cards) == (1.27, 5)
    assert entry["tolerance"] == pytest.approx(0.112, abs=0.001)
    dropped = RatioEstimate(1.118, 1.116, 1.120, 0.95, 30)
    assert judge(dropped, entry["speedup"], entry["tolerance"], file_found=True).verdict == Verdict.PASS  # the old rule
    assert judge(dropped, baseline, entry["tolerance"], file_found=True).verdict == Verdict.REGRESSED
    # Every card's own reading still passes against the center.
    for speedup in (1.211, 1.262, 1.270, 1.314, 1.321):
        reading = RatioEstimate(speedup, speedup * 0.999, speedup * 1.001, 0.95, 30)
        assert judge(reading, baseline, entry["tolerance"], file_found=True).verdict == Verdict.PASS


def test_one_card_or_unrecorded_evidence_keeps_the_blessed_speedup() -> None:
    doc = bless_one(bless_one(None, calibrated(1.30, "card-a")), calibrated(1.20, "card-a"))
    entry = doc["cases"][CASE]
    assert evidence.center_of(entry["calibration"]) is None
    assert evidence.judged_against(entry, entry["tolerance"]) == (entry["speedup"], 0)
    unrecorded = {"speedup": 1.0, "calibration": {"process_speedups": [1.2, 1.3], "spread": 0.01, "runs": 2}}
    assert evidence.judged_against(unrecorded, 0.5) == (1.0, 0)


def test_a_bless_outside_the_evidences_band_is_what_the_gate_holds_the_case_to() -> None:
    # A plain re-bless after the case's code changed keeps the old evidence (and its tolerance): the new speedup,
    # not the old cards' center, is the baseline, or the new code's every run would read as a change.
    entry = {"speedup": 1.6, "tolerance": 0.05, "measured_at": "2026-11-25T00:00:00Z",
             "calibration": {"runs": 2, "spread": 0.01, "measured_at": "2026-11-24T00:00:00Z",
                             "machines": {"card-a": {"speedups": [1.20], "measured_at": "2026-11-24T00:00:00Z"},
                                          "card-b": {"speedups": [1.22], "measured_at": "2026-11-24T01:00:00Z"}}}}
    assert evidence.judged_against(entry, 0.05) == (1.6, 0)
    assert evidence.judged_against({**entry, "speedup": 1.19}, 0.05)[0] == 1.21


def test_cards_that_all_read_one_speed_since_the_bless_outvote_it() -> None:
    # The H100 file's l2_eviction_hints[16]::vs_compile: blessed at 1.212x; eight cards measured after it read
    # 1.236-1.239x, 2.0-2.2% over the bless at a 2% tolerance: three fresh H100s' gate runs said "improved", which
    # fails a strict gate. The bless is older than all of that evidence: the cards' center is the baseline.
    machines = {f"card-{i}": {"speedups": [1.238], "measured_at": f"2026-11-26T0{i}:00:00Z"} for i in range(7)}
    machines["card-7"] = {"speedups": [1.236], "measured_at": "2026-11-26T08:00:00Z"}
    entry = {"speedup": 1.212, "tolerance": 0.02, "measured_at": "2026-11-25T23:00:48Z",
             "calibration": {"runs": 2, "spread": 0.001, "measured_at": "2026-11-25T23:00:48Z", "machines": machines}}
    assert evidence.judged_against(entry, 0.02) == (1.238, 8)
    reading = RatioEstimate(1.238, 1.237, 1.239, 0.95, 26)
    assert judge(reading, 1.212, 0.02, file_found=True).verdict == Verdict.IMPROVED  # the old rule
    assert judge(reading, 1.238, 0.02, file_found=True).verdict == Verdict.PASS
    # A bless as new as the newest evidence (a calibrating bless adds itself to it) is kept.
    assert evidence.judged_against({**entry, "measured_at": "2026-11-26T08:00:00Z"}, 0.02) == (1.212, 0)
