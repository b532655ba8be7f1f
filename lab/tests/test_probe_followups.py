"""lab/probe_followups.py: the latency cases a study's clean runs ask the drift probe about."""

from __future__ import annotations

from pathlib import Path

from lab import probe_followups
from lab.drift_probe import CASE_TESTS
from lab.tests import written_reports


def report(*verdicts: tuple[str, str], remeasured: bool = False) -> dict:
    return {"speedgate_report_version": 1,
            "cases": [{"case_id": case_id, "verdict": verdict, "remeasured": remeasured}
                      for case_id, verdict in verdicts]}


def test_a_latency_case_that_did_not_pass_is_probed_once_and_a_passing_one_is_not() -> None:
    training = CASE_TESTS["training"] + "::vs_eager"
    regional = CASE_TESTS["regional"] + "::regional_vs_whole"
    branch_cond = CASE_TESTS["graph_break"] + "::compiled_fixed_vs_compiled_broken"
    other_break = "perftests/test_compile_graph_breaks.py::test_graph_break_fix[print]::compiled_fixed_vs_compiled_broken"
    runs = [report((training, "inconclusive"), (regional, "pass"), (other_break, "regressed")),
            report((training, "regressed"), (branch_cond, "pass"))]
    assert probe_followups.followups(runs) == ["training"]  # [print] is not the pair the probe builds
    assert probe_followups.followups([report((branch_cond, "regressed"), (regional, "inconclusive"))]) == [
        "regional", "graph_break"]
    assert probe_followups.followups([report((training, "pass"))]) == []


def test_a_pass_the_gate_measured_again_is_probed() -> None:
    """A pass that stood only on a later measurement (the twenty-second H200 study's training step: under the floor,
    then a pass) is the slide the probe looks for, as a verdict that did not pass is."""
    training = CASE_TESTS["training"] + "::vs_eager"
    regional = CASE_TESTS["regional"] + "::regional_vs_whole"
    assert probe_followups.followups([report((training, "pass"), remeasured=True),
                                      report((regional, "pass"))]) == ["training"]


def test_every_probed_test_exists_in_the_suite() -> None:
    root = Path(__file__).resolve().parents[2]
    for test in CASE_TESTS.values():
        path, name = test.split("::", 1)
        assert f"def {name.split('[')[0]}(" in (root / path).read_text(), test


def test_the_command_reads_reports_and_says_which_it_could_not(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    [good] = written_reports(tmp_path, [report((CASE_TESTS["training"] + "::vs_eager", "inconclusive"))])
    bad = tmp_path / "clean1.json"
    bad.write_text("{not json")
    assert probe_followups.main([str(good), str(bad)]) == 0
    out = capsys.readouterr()
    assert out.out.split() == ["training"] and "clean1.json: not read" in out.err
