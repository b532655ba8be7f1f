"""tools/gate_study.py: the injected slowdown is sized from the side's own time, and the table counts honestly."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gate_study", ROOT / "tools" / "gate_study.py")
assert spec and spec.loader
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


class FakeCuda:
    """Events that read back scripted times, and a _sleep that only records what it was asked to spin."""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)
        self.spins: list[int] = []
        outer = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                pass

            def record(self) -> None:
                pass

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: object) -> float:
                return outer.times.pop(0)

        self.Event = Event

    def _sleep(self, cycles: int) -> None:
        self.spins.append(cycles)


def test_the_slowdown_is_a_share_of_the_sides_own_median_time_less_the_spins_fixed_cost():
    plain = [2.0, 2.2, 1.8, 2.0, 9.0, 2.0, 2.0]  # median 2.0 ms: one outlier does not size the spin
    behind_spin = [2.104] * 7  # 100 cycles (0.1 ms at 1000 per ms) added 0.104 ms: the spin costs 0.004 ms more
    cuda = FakeCuda(plain + behind_spin)
    torch = SimpleNamespace(cuda=cuda)
    calls = []
    run = study.slowed(lambda *a: calls.append(a) or sum(a), 0.05, torch, lambda: 1000.0)
    assert run(1, 2) == 3  # the first (checked) call runs plain, then 7 timed calls plain and 7 behind a spin
    assert len(calls) == 15 and cuda.spins == [100] * 7
    cuda.spins.clear()
    assert run(3, 4) == 7
    assert cuda.spins == [96]  # 5% of 2.0 ms is 0.1 ms, less the spin's own 0.004 ms, at 1000 cycles per ms
    run()
    assert cuda.spins == [96, 96]


def _report(verdicts: dict[str, tuple[str, float | None]]) -> dict:
    return {"cases": [{"case_id": c, "timed": True, "verdict": v, "change": ch, "detectable_drop": 0.03}
                      for c, (v, ch) in verdicts.items()]}


def test_the_table_counts_false_alarms_and_detections_per_case():
    bless = {"cases": [{"case_id": "t.py::a", "timed": True, "tolerance": 0.02, "calibration": {"spread": 0.004}},
                       {"case_id": "t.py::b", "timed": True, "tolerance": 0.06, "calibration": {"spread": 0.02}}]}
    clean = [_report({"t.py::a": ("pass", 0.001), "t.py::b": ("pass", -0.01)}),
             _report({"t.py::a": ("pass", -0.003), "t.py::b": ("improved", 0.07)})]
    slowed = {0.05: [_report({"t.py::a": ("regressed", -0.048), "t.py::b": ("pass", -0.05)}),
                     _report({"t.py::a": ("regressed", -0.047), "t.py::b": ("regressed", -0.065)})]}
    text = study.table(bless, clean, slowed)
    assert "| `a` | 2.0% | 0.40% | >= 3.0% | 0/2 | 2/2, -4.8% |" in text
    assert "| `b` | 6.0% | 2.00% | >= 3.0% | 1/2 | 1/2, -5.8% |" in text
    assert "false alarms: 1/4 case-runs (25.0%)" in text
    assert "detected at +5%: 3/4 (75%)" in text
    assert "1 of 2 cases catch a 5% regression (regressed in each of 2 slowed runs)" in text


def test_each_study_process_starts_with_empty_compile_caches_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/shared/warm")
    monkeypatch.setenv(study.SLOWDOWN_ENV, "0.5")  # a stale slowdown in the caller's shell never leaks in
    first = study.process_env(tmp_path, "bless0", None, fresh_caches=True)
    second = study.process_env(tmp_path, "bless1", 0.05, fresh_caches=True)
    for variable in study.CACHE_VARIABLES:
        assert first[variable] != second[variable] and Path(first[variable]).is_dir()
        assert not any(Path(first[variable]).iterdir())
    assert study.SLOWDOWN_ENV not in first and second[study.SLOWDOWN_ENV] == "0.05"
    warm = study.process_env(tmp_path, "clean0", None, fresh_caches=False)
    assert warm["TORCHINDUCTOR_CACHE_DIR"] == "/shared/warm"
