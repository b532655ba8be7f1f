"""lab/compile_child_probe.py on the CPU: its three steps share one cache folder as the suite's compile-modes test and
its fresh process do (the parent saves nothing, the child compiles and saves its graph, the next loads it), and its
reading of the autotune cache names what it holds and what it could not read."""

from __future__ import annotations

import json
from pathlib import Path

from lab import compile_child_probe as probe


def test_the_autotune_cache_is_read_per_op_input_and_precision(tmp_path: Path) -> None:
    cache = tmp_path / "inductor" / "cache"
    cache.mkdir(parents=True)
    (cache / "abc").write_text(json.dumps({"system": {}, "cache": {
        "mm": {"[('cuda', 'torch.bfloat16', 16384, 512)]": {"highest": {"choice-1": 0.1, "choice-2": 0.2}}}}}))
    (cache / "broken").write_text("{not json")
    held = probe.local_autotune_cache(tmp_path / "inductor")
    assert held["abc"] == {"mm": {"[('cuda', 'torch.bfloat16', 16384, 512)]": {"highest": 2}}}
    assert held["broken"].startswith("unreadable: ")
    assert probe.local_autotune_cache(tmp_path / "nothing") == {}


def test_the_steps_share_one_folder_as_the_suite_does(tmp_path: Path) -> None:
    rows = probe.run_mode("default", "plain", tmp_path)
    counters = {row["step"]: row["inductor_counters"] for row in rows}
    assert [row["step"] for row in rows] == ["parent", "child", "again"]
    assert "fxgraph_cache_hit" not in counters["parent"] and "fxgraph_cache_miss" not in counters["parent"]
    assert counters["child"].get("fxgraph_cache_miss") == 1  # the parent saved no graph: the child compiles it
    assert counters["again"].get("fxgraph_cache_hit") == 1  # and saves it for the next fresh process
    assert all(row["first_call_s"] > 0 for row in rows)


def test_a_template_generated_twice_shows_the_lines_that_differ(tmp_path: Path) -> None:
    inductor = tmp_path / "inductor"
    body = [f"    acc += tl.dot(a{i}, b{i})" for i in range(40)]
    first = ["@triton_heuristics.template(", "    inductor_meta={'deterministic': False},", ")", *body]
    twin = ["@triton_heuristics.template(", "    inductor_meta={'deterministic': True},", ")", *body]
    for name, lines in [("aa/one.py", first), ("bb/two.py", twin), ("cc/other.py", ["def pointwise(): pass"])]:
        (inductor / name).parent.mkdir(parents=True)
        (inductor / name).write_text("\n".join(lines))
    found = probe.template_twins(inductor)
    assert found["template_modules"] == 2 and found["with_a_near_twin"] == 2
    assert "-    inductor_meta={'deterministic': False}," in found["closest_pair_diff"]
    assert "+    inductor_meta={'deterministic': True}," in found["closest_pair_diff"]
    assert probe.template_twins(tmp_path / "nothing") == {"template_modules": 0, "with_a_near_twin": 0,
                                                          "closest_pair_diff": []}
