"""lab/side_agreement.py on reports built here: a test whose optimized side times slower beside one reference while
its kernels' busy time does not move, one whose comparisons ran other kernels, a lone comparison (CPU)."""

from __future__ import annotations

import pytest

from lab import side_agreement
from lab.tests import written_reports

FLASH = [{"name": "_attn_fwd_kernel", "registers": 138}]


def case(card: str, name: str, timed: float, busy: float | None, kernels=FLASH, nodeid="t.py::test_attn") -> dict:
    return {"card": card, "judged_at": "2026-11-28T10:00:00Z", "nodeid": nodeid, "name": name, "timed": True,
            "timer": "cuda-events-held", "optimized_ms": timed, "optimized_busy_ms": busy,
            "codegen": {"optimized": kernels}}


def reports() -> list[dict]:
    out = []
    for i in range(4):
        slow = 1.03 if i < 2 else 1.0  # two cards time the side 3% slower beside the compiled reference
        out.append({"speedgate_report_version": 1, "cases": [case(f"card{i}", "vs_eager", 0.170, 0.166), case(f"card{i}", "vs_sdpa", 0.1701, 0.1661),
                              case(f"card{i}", "vs_compile", 0.170 * slow, 0.1662),
                              # another test whose two comparisons ran other kernels: not one side
                              case(f"card{i}", "a", 1.0, 1.0, [{"name": "k1", "registers": 1}], "t.py::test_other"),
                              case(f"card{i}", "b", 1.1, 1.1, [{"name": "k2", "registers": 1}], "t.py::test_other"),
                              # a lone comparison
                              case(f"card{i}", "only", 1.0, 1.0, nodeid="t.py::test_lone")]})
    return out


def test_a_side_timed_slower_beside_one_reference_with_its_busy_time_unmoved_is_named() -> None:
    found = {s["case"]: s for s in side_agreement.summary(side_agreement.offsets(reports()), over=0.02)}
    assert set(found) == {"t.py::test_attn::vs_eager", "t.py::test_attn::vs_sdpa", "t.py::test_attn::vs_compile"}
    compile_ = found["t.py::test_attn::vs_compile"]
    assert compile_["cards"] == 4 and compile_["off"] == ["card0", "card1"]
    assert compile_["timed"] == [pytest.approx(0.1751 / 0.1701 - 1)] * 2  # against the median of the three
    assert abs(compile_["busy"]) < 0.002
    assert found["t.py::test_attn::vs_eager"]["off"] == []
    text = side_agreement.table(list(found.values()), 0.02)
    assert "`t.py::test_attn::vs_compile` | 4 | 2: `card0`, `card1` |" in text and "vs_eager" not in text


def test_the_command_says_what_it_found_and_what_it_could_not_read(tmp_path, capsys) -> None:
    paths = written_reports(tmp_path, reports())
    assert side_agreement.main([*map(str, paths), "--case", "test_attn::vs_compile"]) == 0
    out = capsys.readouterr().out
    assert "vs_compile" in out and "| `card0` | vs_compile | 0.1751 |" in out
    assert side_agreement.main([*map(str, paths), "--over", "0.05"]) == 0
    assert "no comparison's optimized side was timed more than 5% off" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        side_agreement.main([str(paths[0]), "--over", "2"])
    assert "--over is a fraction between 0 and 1, got 2.0" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(SystemExit):
        side_agreement.main([str(broken)])
    assert "broken.json: not a readable speedgate report" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text("{}")  # JSON, but no speedgate report: named, not read as one with no cases
    with pytest.raises(SystemExit):
        side_agreement.main([str(other)])
    assert "other.json: not a readable speedgate report (not a --speedgate-json report)" in capsys.readouterr().err
