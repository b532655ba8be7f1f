"""Baseline files: validation, merging and atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import baseline_doc
from speedgate import baseline


def test_valid_document_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    doc = baseline_doc({"t.py::a": 2.0})
    baseline.write_atomic(path, doc)
    assert baseline.read(path) == doc
    text = path.read_text()
    assert text.endswith("\n") and text == baseline.dumps(doc)
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert baseline.read(tmp_path / "nope.json") is None


def test_corrupt_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text('{"schema_version": 1,')
    with pytest.raises(baseline.BaselineError, match=r"k\.json: is not valid JSON"):
        baseline.read(path)


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["cases"]["t.py::a"].update(speedup="fast"), "cases/t.py::a/speedup"),
        (lambda d: d["cases"]["t.py::a"].update(speedup=-1), "cases/t.py::a/speedup"),
        (lambda d: d["cases"]["t.py::a"].pop("noise"), "cases/t.py::a"),
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(hardware_key="../x"), "hardware_key"),
        (lambda d: d.pop("cases"), "(top level)"),
    ],
)
def test_schema_violations_name_the_place(tmp_path: Path, mutate, where: str) -> None:
    doc = baseline_doc({"t.py::a": 2.0})
    mutate(doc)
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(baseline.BaselineError) as info:
        baseline.read(path)
    assert str(path) in str(info.value) and where in str(info.value)


def test_invalid_document_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text("keep me")
    doc = baseline_doc({"t.py::a": 2.0})
    doc["cases"]["t.py::a"]["speedup"] = float("nan")
    with pytest.raises((baseline.BaselineError, ValueError)):
        baseline.write_atomic(path, doc)
    assert path.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]


def _entry(speedup: float) -> dict:
    return baseline_doc({"x": speedup})["cases"]["x"]


def test_merge_keeps_other_cases_and_rewrites_only_real_moves() -> None:
    existing = baseline_doc({"a": 2.0, "b": 3.0, "c": 4.0})
    entries = {"a": _entry(2.02), "b": _entry(3.5), "d": _entry(1.1)}
    doc, changes = baseline.merge(
        existing, hardware_key="test-box", fingerprint=existing["fingerprint"], entries=entries,
        rewrite_fraction={"a": 0.1 / 3, "b": 0.1 / 3, "d": 0.1 / 3},
    )
    actions = {c.case_id: c.action for c in changes}
    assert actions == {"a": "kept", "b": "updated", "d": "added"}
    assert doc["cases"]["a"]["speedup"] == 2.0  # moved 1% < 3.3%: the old entry stays
    assert doc["cases"]["b"]["speedup"] == 3.5
    assert doc["cases"]["c"]["speedup"] == 4.0  # not run: untouched
    assert doc["cases"]["d"]["speedup"] == 1.1


def test_merge_into_nothing_creates_a_valid_document(tmp_path: Path) -> None:
    doc, changes = baseline.merge(
        None, hardware_key="k", fingerprint={"hardware": {"kind": "cpu", "name": "x"}, "software": {}},
        entries={"a": _entry(2.0)}, rewrite_fraction={},
    )
    baseline.validate(doc, tmp_path / "k.json")
    assert [c.action for c in changes] == ["added"]


def test_merge_rewrites_a_changed_configuration() -> None:
    existing = baseline_doc({"a": 2.0})
    existing["cases"]["a"]["config"] = {"BLOCK_M": 128}
    new = _entry(2.01)
    new["config"] = {"BLOCK_M": 64}
    doc, changes = baseline.merge(existing, hardware_key="test-box", fingerprint=existing["fingerprint"],
                                  entries={"a": new}, rewrite_fraction={"a": 0.1 / 3})
    assert [c.action for c in changes] == ["updated"] and doc["cases"]["a"]["config"] == {"BLOCK_M": 64}
