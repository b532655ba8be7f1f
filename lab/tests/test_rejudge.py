"""lab/rejudge.py on a study folder built here: a clean run whose compiled reference flipped to a known pick, and a
slowed run of that pick, judged against a file with and without the pick."""

from __future__ import annotations

import json
from typing import Any

from lab import rejudge

MAIN = {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [256, 1, 1]}], "optimized": [{"name": "_k"}]}
OTHER = {"reference": [{"name": "triton_poi_fused_gelu_0", "block": [128, 1, 1]}], "optimized": [{"name": "_k"}]}


def numbers(speedup: float) -> dict[str, Any]:
    return {"speedup": speedup, "reference_ms": speedup, "optimized_ms": 1.0, "ci_low": speedup * 0.999,
            "ci_high": speedup * 1.001, "noise": 0.001, "rounds": 40}


def record(speedup: float, kernels: dict[str, Any], verdict: str) -> dict[str, Any]:
    return {"case_id": "t.py::test", "timed": True, "tolerance": 0.02, "verdict": verdict, "change": 0.0,
            "codegen": kernels, **numbers(speedup)}


def test_a_known_pick_turns_a_false_alarm_into_a_pass_and_still_catches_its_slowdown(tmp_path, capsys) -> None:
    calibration = {"runs": 2, "spread": 0.001, "measured_at": "2026-11-27"}
    entry = {**numbers(2.0), "tolerance": 0.02, "calibration": calibration, "codegen": MAIN}
    (tmp_path / "clean0.json").write_text(json.dumps({"cases": [record(2.1, OTHER, "improved")]}))
    (tmp_path / "slow0.05-0.json").write_text(json.dumps({"cases": [record(1.995, OTHER, "pass")]}))
    without = tmp_path / "without.json"
    without.write_text(json.dumps({"cases": {"t.py::test": entry}}))
    rejudge.main([str(without), str(tmp_path)])
    out = capsys.readouterr().out
    # Against the main pick alone: the flip is undone (the reference at its blessed time): pick-changed, no alarm;
    # the slowed run of the faster pick reads inside the main pick's band: not caught, and not a plain pass either,
    # since it measured kernels the file never saw (speedgate.judging.passed_on_another_pick).
    assert "false alarms: 0 of 1" in out and "0 of 1 comparisons catch a 5% regression" in out
    assert "0/1 (pick-changed)" in out
    with_pick = tmp_path / "with.json"
    with_pick.write_text(json.dumps({"cases": {"t.py::test": {**entry, "picks": [
        {**numbers(2.1), "tolerance": 0.02, "calibration": calibration, "measured_at": "2026-11-27",
         "codegen": OTHER}]}}}))
    rejudge.main([str(with_pick), str(tmp_path)])
    out = capsys.readouterr().out
    assert "false alarms: 0 of 1" in out and "1 of 1 comparisons catch a 5% regression" in out


def test_a_rule_rewrites_the_tolerances_of_an_entry_and_its_picks_from_their_evidence(tmp_path, capsys) -> None:
    # One process's two runs 2% apart, another's 0.1%: speedgate's rule takes the widest (three times 2%: 6.0%),
    # the pooled rule their root mean square (three times 1.416%: 4.2%). A reading 5% low passes the one and not the
    # other; a pick's tolerance is written by the same rule.
    calibration = {"runs": 2, "spread": 0.02, "measured_at": "2026-11-27", "process_run_spreads": [0.02, 0.001],
                   "process_speedups": [2.0, 2.0], "process_spread": 0.0}
    entry = {**numbers(2.0), "tolerance": 0.02, "calibration": calibration, "codegen": MAIN,
             "picks": [{**numbers(2.1), "tolerance": 0.02, "calibration": calibration, "codegen": OTHER}]}
    assert rejudge.retolerated(entry, rejudge.RULES["speedgate's"])["tolerance"] == 0.06
    pooled = rejudge.retolerated(entry, rejudge.RULES["pooled in-process"])
    assert pooled["tolerance"] == pooled["picks"][0]["tolerance"] == 0.04248
    (tmp_path / "clean0.json").write_text(json.dumps({"cases": [record(2.0, MAIN, "pass")]}))
    (tmp_path / "slow0.05-0.json").write_text(json.dumps({"cases": [record(1.9, MAIN, "pass")]}))
    path = tmp_path / "file.json"
    path.write_text(json.dumps({"cases": {"t.py::test": entry}}))
    rejudge.main([str(path), str(tmp_path), "--rule", "speedgate's"])
    assert "0 of 1 comparisons catch a 5% regression" in capsys.readouterr().out
    rejudge.main([str(path), str(tmp_path), "--rule", "pooled in-process"])
    assert "1 of 1 comparisons catch a 5% regression" in capsys.readouterr().out
