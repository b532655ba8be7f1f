"""The GitHub workflows as a careful project writes them: actions pinned by commit, no token left behind by checkout,
and installs into a venv of the job's own, never into a self-hosted runner's Python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

WORKFLOWS = sorted((Path(__file__).resolve().parents[1] / ".github" / "workflows").glob("*.yml"))


def test_there_are_workflows() -> None:
    assert len(WORKFLOWS) >= 3


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version_beside_it(workflow: Path) -> None:
    # A tag can be moved to other code; a commit cannot. The comment says which release the commit is.
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", workflow.read_text(), re.MULTILINE)
    assert uses
    for action, rest in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), f"{workflow.name}: {action} is not pinned by commit"
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", rest), f"{workflow.name}: {action}: say its release, '# vX.Y.Z'"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_checkout_leaves_no_credentials(workflow: Path) -> None:
    text = workflow.read_text()
    steps = re.split(r"^\s*- ", text, flags=re.MULTILINE)
    for step in steps:
        if "actions/checkout@" in step:
            assert re.search(r"^\s+persist-credentials: false\b", step, re.MULTILINE), (
                f"{workflow.name}: checkout keeps the job's token in .git/config; set persist-credentials: false")


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_pip_installs_into_a_venv(workflow: Path) -> None:
    # A self-hosted runner keeps its disk between jobs: an install into its own Python changes it for every later job.
    for line in workflow.read_text().splitlines():
        if re.search(r"\bpip3?\b.*\binstall\b", line):
            assert re.search(r"venv/bin/(python3?\"?\s+-m\s+)?pip", line), f"{workflow.name}: installs outside a venv: {line.strip()}"
