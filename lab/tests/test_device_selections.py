"""The selections of lab/device/lib.sh (the tests a device script blesses or studies: BLESS=NAME, STUDY=NAME) each
collect at least one test of the suite: a renamed file or test, or a -k that matches nothing, would otherwise bless
nothing on a GPU and say so only in a log line. Its keep_settings holds the first call's settings for the calls
chained after it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lab" / "device" / "lib.sh"
# A selection is a top-level array assignment of lib.sh whose first element is a path under perftests/.
ASSIGNMENT = re.compile(r"^([a-z_0-9]+)=\(perftests/", re.MULTILINE)
NAMES = ASSIGNMENT.findall(LIB.read_text())


def selection(name: str) -> list[str]:
    """The array's elements as bash reads them (quotes, line continuations)."""
    out = subprocess.run(["bash", "-c", f'source "$1" && printf "%s\\0" "${{{name}[@]}}"', "_", str(LIB)],
                         capture_output=True, text=True, check=True).stdout
    return [word for word in out.split("\0") if word]


def test_lib_sh_names_its_selections() -> None:
    # the ones the device scripts' headers name; a new one is found by the pattern, a lost one fails here
    assert {"heavy", "rebless", "compiled_refs", "held_picks", "steady_states", "graph_breaks", "gluon_fp8",
            "graph_breaks_and_gluon_fp8"} <= set(NAMES)


@pytest.mark.skipif(shutil.which("bash") is None, reason="lib.sh is a bash file")
@pytest.mark.parametrize("name", NAMES)
def test_selection_collects_tests(name: str) -> None:
    words = selection(name)
    for path in (w for w in words if w.startswith("perftests/")):
        assert (ROOT / path).is_file(), f"lib.sh's {name} names {path}, which is not a file"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *words],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0 and collected, (
        f"lib.sh's {name} ({' '.join(words)}) collects no test (exit {done.returncode}):\n{done.stdout[-2000:]}"
        f"{done.stderr[-2000:]}")


def chained_call(state: Path, env: dict[str, str]) -> str:
    """One call of a device script on STATE: lib.sh's keep_settings over the settings suite_study.sh keeps, then the
    values the call goes on with (or `-` for unset), and what it told."""
    script = ('source "$1"; state=$2; work=$2; keep_settings BLESS STUDY SLOWDOWNS PAIR; '
              'echo "BLESS=${BLESS--} STUDY=${STUDY--} SLOWDOWNS=${SLOWDOWNS--} PAIR=${PAIR--}"')
    return subprocess.run(["bash", "-c", script, "_", str(LIB), str(state)], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", **env}).stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="lib.sh is a bash file")
def test_a_chained_call_keeps_the_first_calls_settings(tmp_path: Path) -> None:
    first = chained_call(tmp_path, {"BLESS": "none", "SLOWDOWNS": "0.10", "PAIR": "0"})
    assert first.splitlines()[-1] == "BLESS=none STUDY=- SLOWDOWNS=0.10 PAIR=0"
    # the call that once blessed 'heavy' into the files mid-study: it named no setting
    assert chained_call(tmp_path, {}).splitlines()[-1] == "BLESS=none STUDY=- SLOWDOWNS=0.10 PAIR=0"
    # an empty SLOWDOWNS (the clean run alone) is a setting, not unset
    told = chained_call(tmp_path, {"BLESS": "heavy", "STUDY": "graph_breaks", "SLOWDOWNS": ""})
    assert told.splitlines()[-1] == "BLESS=none STUDY=- SLOWDOWNS=0.10 PAIR=0"
    assert "BLESS=heavy ignored: the first call on this state set BLESS=none" in told
    assert "STUDY=graph_breaks ignored: the first call on this state set STUDY=(unset)" in told
    assert "SLOWDOWNS= ignored" in told
    assert (tmp_path / "summary.txt").read_text().count("ignored") == 3
