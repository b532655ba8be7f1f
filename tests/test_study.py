"""`python -m speedgate study` as a user runs it: clean and slowed gate runs of a selection (each a fresh pytest process
in the project's folder, against the project's own baseline files, which it never writes), and the table with its
catch line. The project sees a fake CUDA clock (tests/test_gate_study.py's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from speedgate import study
from tests.test_gate_study import CASE, CONFTEST


def run_study(project: Path, out: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speedgate", "study", str(out), *args],
                          cwd=project, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)


def test_a_study_of_a_selection_catches_what_it_injects_and_leaves_the_files_alone(tmp_path: Path) -> None:
    project, record = tmp_path / "project", tmp_path / "record"
    project.mkdir()
    record.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_case.py").write_text(CASE)
    env = {"STUDY_RECORD": str(record), "SPEEDGATE_STUDY_SLOWDOWN": "0.5"}  # a stale slowdown never leaks into a run
    bless = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--update-baselines",
                            "--hardware-key", "fake-gpu", "--speedup-tolerance", "0.02"],
                           cwd=project, capture_output=True, text=True, env={**os.environ, "STUDY_RECORD": str(record)},
                           timeout=600)
    assert bless.returncode == 0, bless.stdout[-2000:]
    blessed = (project / "baselines" / "fake-gpu.json").read_text()
    done = run_study(project, tmp_path / "out", "--slowdowns", "0.05,0.10", "--page", str(tmp_path / "page.md"),
                     "--", "test_case.py", "--hardware-key", "fake-gpu", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    runs = {path.stem: json.loads(path.read_text()) for path in (tmp_path / "out").glob("*.json")}
    assert set(runs) == {"clean0", "slow0.05-0", "slow0.1-0"}
    assert [c["verdict"] for c in runs["clean0"]["cases"]] == ["pass"]
    assert [c["verdict"] for c in runs["slow0.05-0"]["cases"]] == ["regressed"]
    assert "1 of 1 comparisons catch a 5% regression" in done.stdout
    assert "false alarms: 0 of 1 comparison-runs" in done.stdout
    assert (project / "baselines" / "fake-gpu.json").read_text() == blessed
    assert "# The gate study on fake-gpu" in (tmp_path / "page.md").read_text()


def report(verdicts: dict[str, str]) -> dict:
    return {"cases": [{"case_id": c, "timed": True, "verdict": v, "change": -0.05, "tolerance": 0.02,
                       "timer": "cuda-sm-cycles-held"} for c, v in verdicts.items()]}


def test_the_table_counts_an_inconclusive_and_another_pick_as_caught_and_says_which() -> None:
    clean = [report({"a": "pass", "b": "pass", "c": "improved"})]
    slowed = {0.05: [report({"a": "regressed", "b": "pick-changed", "c": "pass"})]}
    text = study.table(clean, slowed)
    assert "| `b` | 2.0% | cuda-sm-cycles-held | 0/1 | 1/1 (pick-changed), -5.0% |" in text
    assert "false alarms: 1 of 3 comparison-runs" in text
    assert text.rstrip().endswith("2 of 3 comparisons catch a 5% regression")


def test_bad_slowdowns_are_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "speedgate", "study", str(tmp_path), "--slowdowns", "5%"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--slowdowns must be fractions" in done.stderr
