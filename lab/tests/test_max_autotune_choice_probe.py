"""lab/max_autotune_choice_probe.py on the CPU: the picks it holds, and its refusal without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.max_autotune_choice_probe import CASE, held_picks


def test_the_entrys_picks_are_held_under_this_machines_cache_name(tmp_path: Path) -> None:
    timings = {"cache": {"addmm": {"[[16384, 512]]": {"highest": {"choice-a": 0.0218}}}}}
    baseline = tmp_path / "kind.json"
    baseline.write_text(json.dumps({"cases": {CASE: {"config": {"local": {"blesshash": timings},
                                                                "best_configs": {"f4/k.best_config": {"XBLOCK": 2}}}}}}))
    assert held_picks(baseline, "localhash") == {"local": {"localhash": timings},
                                                 "best_configs": {"f4/k.best_config": {"XBLOCK": 2}}}


def test_an_entry_without_picks_is_refused_by_name(tmp_path: Path) -> None:
    baseline = tmp_path / "kind.json"
    baseline.write_text(json.dumps({"cases": {CASE: {"config": None}}}))
    with pytest.raises(SystemExit, match="holds no autotuner picks"):
        held_picks(baseline, "localhash")


def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    done = subprocess.run([sys.executable, "-m", "lab.max_autotune_choice_probe", str(tmp_path / "out.json")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode != 0 and "needs a CUDA GPU" in done.stderr
    assert not (tmp_path / "out.json").exists()
