"""Baseline files: validation (finite numbers in range), merging, atomic writes, file modes and the update lock."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import baseline_doc
from speedgate import baseline

REPO_BASELINES = sorted((Path(__file__).resolve().parents[1] / "baselines").glob("*.json"))


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


def test_the_repository_baselines_are_valid() -> None:
    assert len(REPO_BASELINES) >= 3
    for path in REPO_BASELINES:
        doc = baseline.read(path)
        assert doc is not None and doc["cases"]


def test_the_repository_baselines_tolerances_follow_the_rule_on_their_evidence() -> None:
    """Every calibrated entry's tolerance is what speedgate.evidence.tolerance_of says of its evidence, and so is
    each other pick's that has its own (two processes or an in-process spread; one process keeps the tolerance it
    was judged with): a change of the rule is applied to the committed files, not left to the next run's evidence."""
    from speedgate import evidence

    stale = []
    for path in REPO_BASELINES:
        for case_id, entry in (baseline.read(path) or {})["cases"].items():
            for where, held in [("", entry), *((f" pick {i + 1}", p) for i, p in enumerate(entry.get("picks") or []))]:
                calibration = held.get("calibration")
                own = where == "" or calibration and evidence.sets_own_tolerance(calibration)
                if calibration and own and not entry.get("tolerance_pinned") \
                        and abs(held["tolerance"] - evidence.tolerance_of(calibration)) > 1e-6:
                    stale.append(f"{path.name}: {case_id}{where}: {held['tolerance']} against "
                                 f"{evidence.tolerance_of(calibration)}")
    assert not stale, stale


def _with_metric(doc: dict[str, Any]) -> dict[str, Any]:
    doc["metrics"] = {"t.py::m::compile_s": {"value": 8.0, "tolerance": 0.5, "direction": "lower", "unit": "s",
                                             "measured_at": "2026-01-01T00:00:00Z", "software": {}}}
    return doc


def _case(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["cases"]["t.py::a"].update({field: value})


def _metric(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["metrics"]["t.py::m::compile_s"].update({field: value})


NAN, INF = float("nan"), float("inf")
# (change, the entry the message must name, what it must say about it)
UNUSABLE = [
    pytest.param(_case("speedup", NAN), "cases/t.py::a", "speedup is NaN; every number must be finite", id="case-speedup-nan"),
    pytest.param(_case("speedup", INF), "cases/t.py::a", "speedup is Infinity", id="case-speedup-inf"),
    pytest.param(_case("speedup", -INF), "cases/t.py::a", "speedup is -Infinity", id="case-speedup-minus-inf"),
    pytest.param(_case("ci_high", INF), "cases/t.py::a", "ci_high is Infinity", id="case-ci_high-inf"),
    pytest.param(_case("noise", NAN), "cases/t.py::a", "noise is NaN", id="case-noise-nan"),
    pytest.param(_case("config", {"BLOCK_M": NAN}), "cases/t.py::a", "config/BLOCK_M is NaN", id="case-config-nan"),
    pytest.param(_case("speedup", 0), "cases/t.py::a/speedup", "less than or equal to the minimum of 0", id="case-speedup-zero"),
    pytest.param(_case("reference_ms", -1.0), "cases/t.py::a/reference_ms", "less than or equal to the minimum of 0", id="case-negative-time"),
    pytest.param(_case("optimized_first_ms", 0.0), "cases/t.py::a/optimized_first_ms", "minimum of 0", id="case-first-call-zero"),
    pytest.param(_case("tolerance", 1.5), "cases/t.py::a/tolerance", "greater than or equal to the maximum of 1", id="case-tolerance-1.5"),
    pytest.param(_case("rounds", 0), "cases/t.py::a/rounds", "less than the minimum of 1", id="case-rounds-zero"),
    pytest.param(_case("flops", -1.0), "cases/t.py::a/flops", "less than the minimum of 0", id="case-flops-negative"),
    pytest.param(_case("ci_low", 2.5), "cases/t.py::a", "speedup 2.0 is outside its interval [2.5, 2.02]", id="case-ci_low-above-speedup"),
    pytest.param(_case("ci_high", 1.5), "cases/t.py::a", "speedup 2.0 is outside its interval [1.98, 1.5]", id="case-ci_high-below-speedup"),
    pytest.param(_metric("value", NAN), "metrics/t.py::m::compile_s", "value is NaN; every number must be finite", id="metric-value-nan"),
    pytest.param(_metric("value", INF), "metrics/t.py::m::compile_s", "value is Infinity", id="metric-value-inf"),
    pytest.param(_metric("value", -INF), "metrics/t.py::m::compile_s", "value is -Infinity", id="metric-value-minus-inf"),
    pytest.param(_metric("tolerance", NAN), "metrics/t.py::m::compile_s", "tolerance is NaN", id="metric-tolerance-nan"),
    pytest.param(_metric("tolerance", -0.5), "metrics/t.py::m::compile_s/tolerance", "less than the minimum of 0", id="metric-tolerance-negative"),
    pytest.param(lambda d: d["fingerprint"]["hardware"].update(l2_mib=INF), "fingerprint/hardware", "l2_mib is Infinity", id="fingerprint-inf"),
]


@pytest.mark.parametrize(("mutate", "entry", "says"), UNUSABLE)
def test_unusable_numbers_are_refused_on_read(tmp_path: Path, mutate: Callable[[dict[str, Any]], None],
                                              entry: str, says: str) -> None:
    doc = _with_metric(baseline_doc({"t.py::a": 2.0}))
    mutate(doc)
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))  # Python writes the non-JSON constants NaN, Infinity, -Infinity
    with pytest.raises(baseline.BaselineError) as info:
        baseline.read(path)
    assert str(info.value).startswith(f"{path}: ") and entry in str(info.value) and says in str(info.value)


@pytest.mark.parametrize(("mutate", "entry", "says"), UNUSABLE)
def test_unusable_numbers_are_never_written(tmp_path: Path, mutate: Callable[[dict[str, Any]], None],
                                            entry: str, says: str) -> None:
    path = tmp_path / "k.json"
    path.write_text("keep me")
    doc = _with_metric(baseline_doc({"t.py::a": 2.0}))
    mutate(doc)
    with pytest.raises(baseline.BaselineError, match="k.json") as info:
        baseline.write_atomic(path, doc)
    assert entry in str(info.value) and says in str(info.value)
    assert path.read_text() == "keep me" and [p.name for p in tmp_path.iterdir()] == ["k.json"]


def test_an_overflowing_literal_is_named_like_infinity(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(json.dumps(baseline_doc({"t.py::a": 2.0})).replace('"speedup": 2.0', '"speedup": 1e400'))
    with pytest.raises(baseline.BaselineError, match=r"k\.json: cases/t\.py::a: speedup is Infinity"):
        baseline.read(path)


@pytest.mark.parametrize("bad", [NAN, INF, 0.0, -2.0, None, "fast"])
def test_merge_replaces_an_unusable_speedup(bad: float | str | None) -> None:
    existing = baseline_doc({"a": 2.0})
    existing["cases"]["a"]["speedup"] = bad  # read() refuses such files; merge must not rely on that
    doc, changes = baseline.merge(existing, hardware_key="test-box", fingerprint=existing["fingerprint"],
                                  entries={"a": _entry(2.0)}, rewrite_fraction={"a": 0.1 / 3})
    assert [c.action for c in changes] == ["updated"] and doc["cases"]["a"]["speedup"] == 2.0
    assert changes[0].old_speedup is None or isinstance(changes[0].old_speedup, float)  # the summary formats it


@pytest.mark.parametrize(("bad", "action"), [(NAN, "updated"), (-INF, "updated"), (0.0, "kept")])
def test_merge_replaces_an_unusable_metric_but_keeps_a_zero(bad: float, action: str) -> None:
    existing = _with_metric(baseline_doc({"a": 2.0}))
    existing["metrics"]["t.py::m::compile_s"]["value"] = bad
    new = dict(existing["metrics"]["t.py::m::compile_s"], value=0.0)
    doc, changes = baseline.merge(existing, hardware_key="test-box", fingerprint=existing["fingerprint"], entries={},
                                  rewrite_fraction={}, metrics={"t.py::m::compile_s": new},
                                  metric_rewrite_fraction={"t.py::m::compile_s": 0.0})
    assert [c.action for c in changes] == [action] and doc["metrics"]["t.py::m::compile_s"]["value"] == 0.0


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Set the process umask for one test, and put the old one back."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002], ids=oct)
def test_a_new_file_gets_the_users_mode(tmp_path: Path, umask: Callable[[int], None], mask: int) -> None:
    umask(mask)
    path = tmp_path / "k.json"
    baseline.write_atomic(path, baseline_doc({"t.py::a": 2.0}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # 0644 under 022, 0600 under 077


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o664), (0o077, 0o640), (0o022, 0o600)], ids=oct)
def test_a_replaced_file_keeps_its_mode(tmp_path: Path, umask: Callable[[int], None], mask: int, mode: int) -> None:
    path = tmp_path / "k.json"
    baseline.write_atomic(path, baseline_doc({"t.py::a": 2.0}))
    path.chmod(mode)
    umask(mask)
    baseline.write_atomic(path, baseline_doc({"t.py::a": 3.0}))
    assert stat.S_IMODE(path.stat().st_mode) == mode and baseline.read(path) == baseline_doc({"t.py::a": 3.0})


def test_update_reads_changes_and_writes(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "k.json"
    seen: list[dict[str, Any] | None] = []

    def add(speedup: float) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
        def change(existing: dict[str, Any] | None) -> dict[str, Any] | None:
            seen.append(existing)
            return baseline.merge(existing, hardware_key="test-box", fingerprint=baseline_doc({})["fingerprint"],
                                  entries={f"c{speedup}": _entry(speedup)}, rewrite_fraction={})[0]
        return change

    first = baseline.update(path, add(2.0))
    second = baseline.update(path, add(3.0))
    assert seen[0] is None and seen[1] == first
    assert second is not None and baseline.read(path) == second and set(second["cases"]) == {"c2.0", "c3.0"}
    assert baseline.update(path, lambda existing: None) is None and baseline.read(path) == second


def test_update_refuses_an_unusable_file_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    text = json.dumps(baseline_doc({"t.py::a": NAN}))
    path.write_text(text)
    calls: list[dict[str, Any] | None] = []

    def change(existing: dict[str, Any] | None) -> dict[str, Any] | None:
        calls.append(existing)
        return baseline_doc({"t.py::a": 2.0})

    with pytest.raises(baseline.BaselineError, match="speedup is NaN"):
        baseline.update(path, change)
    assert calls == [] and path.read_text() == text


def test_update_names_the_lock_it_could_not_take(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.json"
    monkeypatch.setattr(baseline, "LOCK_TIMEOUT_S", 0.2)
    with open(f"{path}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as another process blessing into the same file would
        with pytest.raises(baseline.BaselineError, match=r"k\.json\.lock: could not take the lock on k\.json"):
            baseline.update(path, lambda existing: baseline_doc({"t.py::a": 2.0}))
    assert not path.exists()
