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

    def module(config: str, deterministic: bool) -> list[str]:
        meta = f"    inductor_meta={{'deterministic': {deterministic}, 'config_args': {{{config}}}}},"
        return ["@triton_heuristics.template(", meta, ")", *body]

    modules = {"aa/one.py": module("'BLOCK_M': 64", False), "bb/two.py": module("'BLOCK_M': 64", True),
               # another candidate, one line from the first: not a twin (its diff would be the config itself)
               "dd/other_config.py": module("'BLOCK_M': 128", False),
               # the same config_args, launched with other warps: another candidate too
               "ee/other_warps.py": [*module("'BLOCK_M': 64", False), "num_warps=8"],
               "cc/other.py": ["def pointwise(): pass"]}
    for name, lines in modules.items():
        (inductor / name).parent.mkdir(parents=True)
        (inductor / name).write_text("\n".join(lines))
    found = probe.template_twins(inductor)
    assert found["template_modules"] == 4 and found["with_a_twin"] == 2
    assert any(line.startswith("-") and "'deterministic': False" in line for line in found["closest_pair_diff"])
    assert any(line.startswith("+") and "'deterministic': True" in line for line in found["closest_pair_diff"])
    assert not any("128" in line or "num_warps" in line for line in found["closest_pair_diff"])
    assert probe.template_twins(tmp_path / "nothing") == {"template_modules": 0, "with_a_twin": 0,
                                                          "closest_pair_diff": []}
