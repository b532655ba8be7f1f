"""tools/gate_study.py, run as a user runs it (its own process, its pytest runs in processes of their own): the
injected slowdown is a share of the side's blessed time, each study process starts with empty compile caches of its own
and only the slowed runs carry the slowdown, and the table counts false alarms and detections honestly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedgate import study as speedgate_study

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "gate_study.py"

# A project whose pytest runs see a fake CUDA: a clock that the optimized side advances by 2 ms a call and the spin
# kernel (torch.cuda._sleep) by 1 ms per 1000 cycles plus 4 us a launch; events read that clock. The gate times it
# on the CPU, so each side also keeps the host busy as long as it takes on that clock (3 ms and 2 ms): the blessed
# time the study's slowdown is a share of. Each run records the spins it was asked for and its environment.
CONFTEST = '''
import json
import os

import torch

CLOCK = [0.0]
SPINS = []


class Event:
    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = CLOCK[0]

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.at - self.at


def _sleep(cycles):
    SPINS.append(cycles)
    CLOCK[0] += cycles / 1000.0 + 0.004


torch.cuda.Event = Event
torch.cuda._sleep = _sleep


def pytest_sessionfinish(session):
    names = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "SPEEDGATE_STUDY_SLOWDOWN")
    with open(os.path.join(os.environ["STUDY_RECORD"], f"{os.getpid()}.json"), "w") as f:
        json.dump({"spins": SPINS, "env": {name: os.environ.get(name) for name in names}}, f)
'''
CASE = '''
import time

import conftest
import torch

x = torch.ones(1000)


def busy(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def reference():
    busy(3.0)
    return x * 2


def optimized():
    conftest.CLOCK[0] += 2.0
    busy(2.0)
    return x + x


def test_double(perf):
    perf.compare(reference, optimized)
'''


def study(out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, str(TOOL), str(out), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def fake_gpu_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project of CASE under the fake CUDA clock (CONFTEST), and the folder its runs record into."""
    project, record = tmp_path / "project", tmp_path / "record"
    project.mkdir()
    record.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_case.py").write_text(CASE)
    return project, record


def records(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in folder.glob("*.json")]


def test_a_study_slows_a_cpu_timed_side_by_the_hosts_wait_and_gives_each_process_its_own_caches(tmp_path: Path) -> None:
    project, record = fake_gpu_project(tmp_path)
    # A stale slowdown in the caller's shell never leaks into a run; the caller's warm cache is not used.
    caller = {"STUDY_RECORD": str(record), "SPEEDGATE_STUDY_SLOWDOWN": "0.5", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "warm")}
    out = tmp_path / "out"
    study(out, "--calibrate", "2", "--processes", "1", "--runs", "1", "--slowdowns", "0.30", "--repeat", "1",
          "--cases", str(project / "test_case.py"), env=caller)
    runs = {Path(r["env"]["TRITON_CACHE_DIR"]).parent.name: r for r in records(record)}
    assert set(runs) == {"bless0", "clean0", "slow0.3-0"}
    for label, run in runs.items():
        for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            assert Path(run["env"][variable]).parent == out / "caches" / label and Path(run["env"][variable]).is_dir()
        assert run["env"]["SPEEDGATE_STUDY_SLOWDOWN"] == ("0.3" if label.startswith("slow") else None)
        # Timed on the CPU's clock (the fake CUDA is only torch.cuda's events and spins): no spin kernel is queued,
        # the host's wait is the slowdown (a spin would have advanced the fake clock, which nothing times).
        assert run["spins"] == [], (label, run["spins"][:10])
    # The wait is 30% of the side's blessed 2 ms: it landed as asked, against the side's reference, and the slowed
    # run failed the comparison.
    clean, slowed = (json.loads((out / f"{label}.json").read_text())["cases"] for label in ("clean0", "slow0.3-0"))
    landed = speedgate_study.delivered(clean, slowed)
    assert landed is not None and 0.25 <= landed <= 0.35, landed
    assert "| `test_double` |" in (out / "study.md").read_text() and "| 1/1, -2" in (out / "study.md").read_text()
    assert (out / "study.md").read_text().startswith("| case | tolerance |")
    # --warm-caches: the caller's caches, shared.
    for path in record.iterdir():
        path.unlink()
    study(tmp_path / "warm-out", "--calibrate", "2", "--processes", "1", "--runs", "0", "--slowdowns", "",
          "--warm-caches", "--cases", str(project / "test_case.py"), env=caller)
    (run,) = records(record)
    assert run["env"]["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "warm") and run["env"]["SPEEDGATE_STUDY_SLOWDOWN"] is None


def _report(verdicts: dict[str, tuple[str, float | None]]) -> dict:
    return {"cases": [{"case_id": c, "timed": True, "verdict": v, "change": ch, "detectable_drop": 0.03}
                      for c, (v, ch) in verdicts.items()]}


def test_the_table_counts_false_alarms_and_detections_per_case(tmp_path: Path) -> None:
    # A study resumed from its reports (a run whose report exists is not run again): only the table is made.
    out = tmp_path / "out"
    (out / "baselines").mkdir(parents=True)
    entries = {"t.py::a": {"tolerance": 0.02, "calibration": {"spread": 0.004}},
               "t.py::b": {"tolerance": 0.06, "calibration": {"spread": 0.02}}}
    (out / "baselines" / "gpu.json").write_text(json.dumps({"hardware_key": "gpu", "cases": entries}))
    # Another kind's file with the same cases (a folder holds every kind's): the runs were not judged against it.
    other = {c: {"tolerance": 0.5, "calibration": {"spread": 0.1}} for c in entries}
    (out / "baselines" / "other-gpu.json").write_text(json.dumps({"hardware_key": "other-gpu", "cases": other}))
    reports = {"bless0": {"cases": [{"case_id": c, "timed": True, "hardware_key": "gpu"} for c in entries]},
               "clean0": _report({"t.py::a": ("pass", 0.001), "t.py::b": ("pass", -0.01)}),
               "clean1": _report({"t.py::a": ("pass", -0.003), "t.py::b": ("improved", 0.07)}),
               "slow0.05-0": _report({"t.py::a": ("regressed", -0.048), "t.py::b": ("pass", -0.05)}),
               "slow0.05-1": _report({"t.py::a": ("regressed", -0.047), "t.py::b": ("regressed", -0.065)})}
    for label, report in reports.items():
        (out / f"{label}.json").write_text(json.dumps(report))
    done = study(out, "--processes", "1", "--runs", "2", "--slowdowns", "0.05", "--repeat", "2")
    assert done.stdout.count("kept from an earlier run") == 5
    text = (out / "study.md").read_text()
    assert "| `a` | 2.0% | 0.40% | >= 3.0% | 0/2 | 2/2, -4.8% |" in text
    assert "| `b` | 6.0% | 2.00% | >= 3.0% | 1/2 | 1/2, -5.8% |" in text
    assert "false alarms: 1/4 case-runs (25.0%)" in text
    assert "detected at +5%: 3/4 (75%)" in text
    assert "1 of 2 cases catch a 5% regression (regressed in each of 2 slowed runs)" in text
    assert text in done.stdout


def test_every_default_case_is_a_test_the_suite_has() -> None:
    """The study's default cases are node ids of perftests/: one renamed or dropped there would leave its family out
    of the study without a word (pytest runs what it finds and says nothing of an id it could not find inside a
    file it collected)."""
    sys.path.insert(0, str(ROOT))
    try:
        from tools.gate_study import CASES
    finally:
        sys.path.remove(str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *CASES],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    collected = {line.strip() for line in done.stdout.splitlines() if "::" in line}
    for case in CASES:
        assert any(node == case or node.startswith(case + "[") for node in collected), f"{case} collects nothing"


def test_a_run_writes_its_log_as_it_goes(tmp_path: Path) -> None:
    """A study's run of the whole suite takes minutes: its output is in OUT/<label>.log while it runs (a run cut off
    by a deadline or a lost machine left no log at all when it was kept in memory until the end)."""
    from speedgate import study

    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "test_live.py").write_text(
        "from pathlib import Path\n\n"
        "def test_first():\n    print('first test ran')\n\n"
        f"def test_the_log_exists_meanwhile():\n    assert Path({str(out / 'clean0.log')!r}).exists()\n")
    loaded = study.run_pytest(out, "clean0", ["-s", "-p", "no:xdist", str(tmp_path / "test_live.py")], cwd=tmp_path)
    text = (out / "clean0.log").read_text()
    assert "first test ran" in text and "2 passed" in text, text
    assert loaded["cases"] == []


@pytest.mark.parametrize("ending", ["interrupted", "exit 2"])
def test_a_run_cut_off_midway_is_run_again_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    """A deadline's SIGINT (or a crash) leaves a report of the cases the run got to: the study must not take it for
    a finished run when it is started again with the same OUT."""
    sys.path.insert(0, str(ROOT))
    try:
        from tools import gate_study
    finally:
        sys.path.remove(str(ROOT))
    calls: list[str] = []

    def cut_off(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        report = Path(cmd[cmd.index("--speedgate-json") + 1])
        report.write_text(json.dumps({"cases": [{"case_id": "half::done", "timed": True}]}))
        calls.append(report.name)
        if ending == "interrupted":
            raise KeyboardInterrupt
        return subprocess.CompletedProcess(cmd, 2, "", "")

    monkeypatch.setattr(subprocess, "run", cut_off)  # speedgate.study.run_pytest runs the process
    with pytest.raises(KeyboardInterrupt if ending == "interrupted" else SystemExit):
        gate_study.run_pytest(tmp_path, "clean0", ["perftests/test_x.py"], [])
    assert not (tmp_path / "clean0.json").exists() and (tmp_path / "clean0.incomplete.json").exists()
    with pytest.raises(KeyboardInterrupt if ending == "interrupted" else SystemExit):
        gate_study.run_pytest(tmp_path, "clean0", ["perftests/test_x.py"], [])
    assert calls == ["clean0.json", "clean0.json"]  # run again, not "kept from an earlier run"
