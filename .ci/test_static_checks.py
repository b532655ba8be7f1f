"""The repository's static checks, as tests that tox.ini's `tests` environment runs first: lint and import order
(ruff), types (mypy: strict on the pure core, see pyproject.toml) and the workflows against GitHub's schema
(check-jsonschema). Each is one command, run from the repository's root with this interpreter's tools (the
environment installs them).

As tests, they run inside the one pytest, on an xdist worker beside the other tests rather than before all of them;
a failing check fails the run with its output among pytest's failures, and pytest's summary stays the run's last
line (.ci/run). What that saves: docs/results/cpu.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github" / "workflows").glob("*.yml"))

CHECKS = {
    "ruff": ["ruff", "check", "."],
    "mypy": ["mypy"],  # its files and options: pyproject.toml's [tool.mypy]
    "workflow-schema": ["check_jsonschema", "--builtin-schema", "vendor.github-workflows", *WORKFLOWS],
}


@pytest.mark.parametrize("check", CHECKS)
def test_static_check_passes(check: str) -> None:
    module, *args = CHECKS[check]
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"python -m {' '.join(CHECKS[check])}: exit {done.returncode}\n{done.stdout}{done.stderr}", pytrace=False)
