"""What does test_compile_mode's fresh process for peak memory spend its time on, and does the compile it repeats
set the peak it reads? (GPU; the suite's peak_memory_fresh_process_gib, perftests/support/compile_time.py)

Usage: python -m lab.compile_child_probe OUT [--modes default,reduce-overhead,max-autotune] [--parent pytest]

Per mode, three fresh processes share one empty cache folder, in this order:
  parent  the test's compile: FX graph and AOTAutograd caches off (perftests.support.compile_time.no_compile_caches),
          as test_compile_mode compiles inside from_scratch();
  child   the suite's child as it is (three_calls_peak_gib): the caches on, finding the parent's kernels and picks;
  again   the same child once more: it finds the FX graph the child before it wrote.
With --parent pytest the first step is the suite's test_compile_mode itself (its compile and its own child), run
with the folder as its caches. After each step the probe lists what the folder's autotune cache holds, per op, input
key and matmul precision: a child that times GEMM candidates again shows as keys the parent did not write; and the
lines that differ between the closest two template modules generated twice with different code (why it timed them
again).
Each prints (and OUT/<mode>.json keeps) the process's seconds, its first call's seconds, the device's peak allocated
GiB through the first call (the compile) and through three calls after it (counted afresh, as the suite's child
does), and inductor's counters (FX graph cache hits and misses, autotuning). The second peak is the suite's metric:
if it is the same in all three steps, whether a process autotuned does not set it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILDER = "perftests.models.transformer:compile_time_builder"
STEPS = [("parent", True), ("child", False), ("again", False)]  # (label, compile caches off)


def measure(mode: str, caches_off: bool) -> dict[str, Any]:
    """In the probe's child process: compile the suite's builder in mode, then three calls; seconds, peaks, counters."""
    import importlib

    import torch
    from torch._dynamo.utils import counters

    from perftests.support.compile_time import no_compile_caches, no_grad

    module, function = BUILDER.split(":")
    fn, args = getattr(importlib.import_module(module), function)()
    compiled = torch.compile(fn, mode=None if mode == "default" else mode)
    call = no_grad(compiled, *args)
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    peak = (lambda: torch.cuda.max_memory_allocated() / 2**30) if cuda else (lambda: float("nan"))  # CPU: smoke test
    with no_compile_caches() if caches_off else contextlib.nullcontext():
        sync()
        start = time.perf_counter()
        call()
        sync()
        first_s = time.perf_counter() - start
        peak_first = peak()
        if cuda:
            torch.cuda.reset_peak_memory_stats()  # as the suite's three_calls_peak_gib: the compiling call left out
        for _ in range(3):
            call()
        sync()
    return {"first_call_s": first_s, "peak_first_call_gib": peak_first, "peak_three_calls_gib": peak(),
            "inductor_counters": {k: v for k, v in sorted(counters["inductor"].items())
                                  if any(w in k for w in ("cache", "autotune", "precompile", "coordesc", "fusion"))}}


def local_autotune_cache(inductor: Path) -> dict[str, Any]:
    """What the folder's select_algorithm cache (inductor's autotune_local_cache) holds: per file, per op, per input
    key and per float32 matmul precision, the number of candidates timed."""
    held: dict[str, Any] = {}
    for path in sorted((inductor / "cache").glob("*")):
        try:
            cache = json.loads(path.read_text())["cache"]
        except (OSError, ValueError, KeyError) as exc:
            held[path.name] = f"unreadable: {exc}"
            continue
        held[path.name] = {op: {key[:60]: {precision: len(timings) for precision, timings in by_precision.items()}
                                for key, by_precision in by_key.items()} for op, by_key in cache.items()}
    return held


def template_twins(inductor: Path, shown: int = 40) -> dict[str, Any]:
    """Where one folder holds the same GEMM template candidate generated twice with different code (so hashed twice,
    and timed twice): how many template modules it holds, how many have a twin (another module of the same
    candidate: the same config_args in its inductor_meta and the same num_stages and num_warps, other code), and the lines that differ between the closest
    such pair (a unified diff, at most `shown` lines). Candidates of other configs are never paired: their diff is
    the config itself."""
    import difflib
    import re

    modules = []
    for path in sorted(inductor.glob("*/*.py")):
        try:
            text = path.read_text()
        except OSError:
            continue
        if "triton_heuristics.template" in text:
            found = re.search(r"'config_args': (\{[^}]*\})", text)
            launch = re.findall(r"num_(?:stages|warps)=\d+", text)  # not in config_args, and part of the candidate
            modules.append((path, (found.group(1) if found else "") + " ".join(launch), text.splitlines()))
    best: tuple[float, int, int] | None = None
    twins = 0
    for i, (_, config, a) in enumerate(modules):
        closest = max(((difflib.SequenceMatcher(None, a, b).quick_ratio(), j)
                       for j, (_, other, b) in enumerate(modules) if j != i and other == config and b != a),
                      default=None)
        if closest is not None:
            twins += 1
            if best is None or closest[0] > best[0]:
                best = (closest[0], i, closest[1])
    diff: list[str] = []
    if best is not None:
        (path_a, _, a), (path_b, _, b) = modules[best[1]], modules[best[2]]
        diff = list(difflib.unified_diff(a, b, path_a.name, path_b.name, lineterm="", n=0))[:shown]
    return {"template_modules": len(modules), "with_a_twin": twins, "closest_pair_diff": diff}


def pytest_step(mode: str, env: dict[str, str], report: Path) -> dict[str, Any]:
    """The suite's own test_compile_mode[mode] as the parent, its compile caches in env's folders (the lab's 'off'
    variant of from_scratch: only the FX graph and AOTAutograd caches off), so that its child and the probe's steps
    after it find what it wrote. A throwaway baseline folder: nothing committed is touched."""
    with tempfile.TemporaryDirectory(prefix="lab-compile-child-baselines-") as baselines:
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "lab.from_scratch_variants",
                               "-q", "perftests/test_compile_modes.py", "-k", f"test_compile_mode and {mode}",
                               "--baseline-dir", baselines, "--speedgate-json", str(report)],
                              env={**env, "SPEEDGATE_FROM_SCRATCH": "off"}, cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
    if done.returncode != 0:  # against an empty folder every comparison is new: a failure is the test's own
        raise RuntimeError(f"{mode} pytest: exit {done.returncode}\n{done.stdout[-3000:]}")
    metrics = {m["name"]: m["value"] for m in json.loads(report.read_text())["metrics"]}
    return {"metrics": metrics, "summary": done.stdout.strip().splitlines()[-1:]}


def run_mode(mode: str, parent: str, out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lab-compile-child-") as caches:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{caches}/inductor", "TRITON_CACHE_DIR": f"{caches}/triton",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
        for label, off in STEPS:
            start = time.perf_counter()
            if label == "parent" and parent == "pytest":
                row: dict[str, Any] = {"mode": mode, "step": "pytest",
                                       **pytest_step(mode, env, out / f"{mode}-pytest-report.json")}
                row["process_s"] = time.perf_counter() - start
            else:
                code = (f"import json, lab.compile_child_probe as p; "
                        f"print('RESULT ' + json.dumps(p.measure({mode!r}, {off!r})))")
                done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      timeout=900)
                wall = time.perf_counter() - start
                lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
                if done.returncode or not lines:
                    raise RuntimeError(f"{mode} {label}: exit {done.returncode}\n{done.stderr[-3000:]}")
                row = {"mode": mode, "step": label, "process_s": wall, **json.loads(lines[-1][len("RESULT "):])}
            row["autotune_cache"] = local_autotune_cache(Path(caches) / "inductor")
            row["template_twins"] = template_twins(Path(caches) / "inductor")
            rows.append(row)
            if row["step"] == "pytest":
                print(f"{mode:16} pytest  process {row['process_s']:6.1f} s  metrics {row['metrics']}  "
                      f"{row['summary']}", flush=True)
            else:
                print(f"{mode:16} {label:7} process {row['process_s']:6.1f} s  first call {row['first_call_s']:6.1f} s  "
                      f"peak through the compile {row['peak_first_call_gib']:.4f} GiB, through 3 calls after it "
                      f"{row['peak_three_calls_gib']:.4f} GiB  {row['inductor_counters']}", flush=True)
            print(f"{'':16} autotune cache after it: {json.dumps(row['autotune_cache'])}", flush=True)
            twins = row["template_twins"]
            print(f"{'':16} template modules {twins['template_modules']}, with a twin {twins['with_a_twin']}",
                  *twins["closest_pair_diff"], sep="\n" + " " * 17, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--modes", default="default,reduce-overhead,max-autotune")
    parser.add_argument("--parent", choices=["plain", "pytest"], default="plain",
                        help="the first step: a plain process that compiles, or the suite's test itself")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    for mode in options.modes.split(","):
        rows = run_mode(mode, options.parent, options.out)
        (options.out / f"{mode}-{options.parent}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
