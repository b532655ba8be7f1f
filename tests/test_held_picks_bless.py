"""perftests/test_compile_modes.py's max-autotune case under a plain bless: its compile there holds the fresh
process's picks and tunes what they lack, which no gate times, so compile_s_held_picks must not be blessed from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_plain_bless_does_not_bless_the_held_picks_seconds_and_says_why(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-W", "always",
                           "perftests/test_compile_modes.py", "-k", "test_compile_mode and max-autotune",
                           "--update-baselines", "--baseline-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "compile_s_held_picks not recorded: this compile held the fresh process's picks" in done.stdout
    [blessed] = tmp_path.glob("*.json")
    metrics = json.loads(blessed.read_text())["metrics"]
    assert any(k.endswith("::compile_s_fresh_process") for k in metrics)  # the case's other seconds are blessed
    assert not any(k.endswith("::compile_s_held_picks") for k in metrics)
