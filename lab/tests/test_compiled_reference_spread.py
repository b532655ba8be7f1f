"""lab/compiled_reference_spread.py's plumbing on the CPU (its timings are the GPU's business): the table it prints
from the reports of its processes, and its plugin, which swaps the suite's compiled reference for the autotuned one
only in the mode that asks for it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab import compiled_reference_spread as tool
from perftests.support import compiled as suite


def _report(path: Path, cases: list[tuple[str, float, float, float]]) -> Path:
    path.write_text(json.dumps({"cases": [
        {"case_id": f"perftests/test_x.py::{name}", "timed": True, "reference_ms": ms, "speedup": speedup,
         "reference_first_ms": first_ms}
        for name, ms, speedup, first_ms in cases
    ] + [{"case_id": "perftests/test_x.py::test_a::vs_eager", "timed": True, "reference_ms": 1.0, "speedup": 9.0}]}))
    return path


def test_table_has_a_row_per_case_and_mode_with_the_spread_of_its_processes(tmp_path: Path) -> None:
    reports = {
        "autotune": [_report(tmp_path / "a0.json", [("test_a::vs_compile", 0.10, 1.00, 20000.0)]),
                     _report(tmp_path / "a1.json", [("test_a::vs_compile", 0.14, 1.40, 30000.0)])],
        "suite": [_report(tmp_path / "s0.json", [("test_a::vs_compile", 0.12, 1.20, 1000.0)]),
                  _report(tmp_path / "s1.json", [("test_a::vs_compile", 0.12, 1.21, 3000.0)]),
                  tmp_path / "missing.json"],
    }
    lines = tool.table(reports)
    rows = [line for line in lines[2:]]
    assert len(rows) == 2, lines  # vs_eager is not a compiled pair; the missing report is skipped
    autotune, mine = rows
    assert autotune.startswith("| `test_a::vs_compile` | autotune | 0.1200 | 25.0 | 1.000, 1.400 | 33.3% |")
    assert mine.startswith("| `test_a::vs_compile` | suite | 0.1200 | 2.0 | 1.200, 1.210 | 0.8% |")


@pytest.mark.parametrize("mode, swapped", [("autotune", True), ("suite", False), (None, False)])
def test_plugin_swaps_the_reference_only_in_autotune_mode(monkeypatch: pytest.MonkeyPatch, mode: str | None,
                                                          swapped: bool) -> None:
    if mode is None:
        monkeypatch.delenv(tool.VARIABLE, raising=False)
    else:
        monkeypatch.setenv(tool.VARIABLE, mode)
    cleanups: list = []
    plain = suite.compiled
    tool.pytest_configure(SimpleNamespace(add_cleanup=cleanups.append))
    try:
        assert (suite.compiled is not plain) == swapped
    finally:
        for cleanup in cleanups:
            cleanup()
    assert suite.compiled is plain


def test_each_process_keeps_the_callers_python_path_and_gets_caches_of_its_own(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU machine's plugin dependencies come from a PYTHONPATH the device script exports (/tmp/site): a child
    that replaced it with the repository's root could not import jsonschema (the first GPU run of this probe)."""
    seen: list[dict[str, str]] = []
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    monkeypatch.setattr(tool.subprocess, "run", lambda *a, **k: seen.append(k["env"]))
    tool.run(tmp_path, "autotune", 0, ["perftests/test_x.py"])
    tool.run(tmp_path, "suite", 0, ["perftests/test_x.py"])
    assert [env["PYTHONPATH"].split(tool.os.pathsep) for env in seen] == [[str(tool.ROOT), "/tmp/site"]] * 2
    assert [env[tool.VARIABLE] for env in seen] == ["autotune", "suite"]
    assert seen[0]["TRITON_CACHE_DIR"] != seen[1]["TRITON_CACHE_DIR"]


def test_a_process_cut_off_midway_is_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadline's SIGINT leaves a report of the cases the process got to: the next call must run it again, not
    take it for done (the probe resumes from the reports it finds)."""
    calls: list[str] = []

    def cut_off(cmd: list[str], **kwargs: object) -> None:
        report = Path(cmd[cmd.index("--speedgate-json") + 1])
        report.write_text(json.dumps({"cases": []}))
        calls.append(report.name)
        raise KeyboardInterrupt

    monkeypatch.setattr(tool.subprocess, "run", cut_off)
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            tool.run(tmp_path, "suite", 0, ["perftests/test_x.py"])
        assert not (tmp_path / "suite-0.json").exists() and (tmp_path / "suite-0.incomplete.json").exists()
    assert calls == ["suite-0.json", "suite-0.json"]
