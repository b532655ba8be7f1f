"""The suite's own conftest.py under `pytest -n 2`: xdist's scheduler is made with xdist's own chunks (the one-at-a-time
schedule measured slower for the compiled cases, docs/results/suite-time.md) and with what the command line gives,
read where xdist makes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

ROOT = Path(__file__).resolve().parents[1]
# A plugin that writes down what xdist's scheduler will be made with, then lets xdist make it.
SPY = """
import json, os

def pytest_xdist_make_scheduler(config, log):
    with open(os.environ["SCHEDULE_SPY"], "w") as out:
        json.dump({"dist": config.getvalue("dist"), "maxschedchunk": config.getoption("maxschedchunk")}, out)
"""


def scheduled(tmp_path: Path, *args: str) -> dict[str, object]:
    (tmp_path / "schedule_spy.py").write_text(SPY)
    spy = tmp_path / "spy.json"
    env = {**os.environ, "SCHEDULE_SPY": str(spy), "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # .ci's static checks, none selected: the suite's conftest.py runs, the workers start and collect, nothing runs.
    done = subprocess.run([sys.executable, "-m", "pytest", ".ci", "-p", "schedule_spy", "-p", "no:cacheprovider", "-n", "2",
                           "-k", "no_test_is_named_this", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 5, done.stdout + done.stderr  # 5: no tests ran
    return json.loads(spy.read_text())


def test_minus_n_keeps_xdists_own_chunks(tmp_path: Path) -> None:
    assert scheduled(tmp_path) == {"dist": "load", "maxschedchunk": None}


def test_a_chunk_on_the_command_line_is_kept(tmp_path: Path) -> None:
    assert scheduled(tmp_path, "--maxschedchunk", "4") == {"dist": "load", "maxschedchunk": 4}
