"""Where a fresh process of the compile cases spends its time, and what the profiler's audit spends on a large
model (GPU; docs/results/suite-time.md). Lab only: the suite's own children are perftests/support/compile_time.py's.

Usage: python -m lab.fresh_process_probe OUT [--repeat 2] [--max-autotune | --only max-autotune]

1. `import torch` alone in a fresh process, twice (the first may read the libraries from disk).
2. test_compile_mode's child for peak memory (default mode), inside from_scratch(saving=True) after this process
   compiled and saved the graph, as the suite runs it: each step stamped from the spawn to the exit (python's
   start, torch imported, the device ready, the model built, the compiled first call, three calls, exit), and
   with TORCHINDUCTOR_COMPILE_THREADS=1 (no compile worker pool), and forked from a process that had imported
   torch and the builder's modules already (what a preloaded fork server would save). The suite's own call
   (peak_gib_in_fresh_process) is timed beside them.
3. (--max-autotune, or --only max-autotune) test_compile_mode[max-autotune]'s compile from empty caches in a fresh
   process, with where dynamo and inductor say its time went; with --only, then the test itself alone in pytest and
   its whole file, each test's compile times dumped by this module as a pytest plugin (-p lab.fresh_process_probe).
4. The large model's eager forward (test_compile_large_model's reference) under CudaTimer.profile_calls: its
   seconds, and those of reading the trace through torch.profiler's events() against its raw kineto events.
Prints a table per part; OUT/fresh_process_probe.json keeps every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILDER = "perftests.models.transformer:compile_time_builder"

CHILD = r"""
import json, os, sys, time
stamps = {"python": time.time()}
import torch
stamps["torch"] = time.time()
import importlib
from perftests.support.compile_time import no_grad
module, function = sys.argv[1].split(":")
builder = getattr(importlib.import_module(module), function)
stamps["modules"] = time.time()
""" + r"""
def work(stamps, mode):
    import torch
    cuda = torch.cuda.is_available()  # the CPU: a smoke test of the probe (lab/tests)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.zeros(1, device="cuda" if cuda else "cpu")
    sync()
    stamps["device"] = time.time()
    fn, args = builder()
    sync()
    stamps["built"] = time.time()
    compiled = torch.compile(fn, mode=None if mode == "default" else mode)
    call = no_grad(compiled, *args)
    if os.environ.get("PROBE_PROFILE"):
        import cProfile, pstats
        profiler = cProfile.Profile()
        profiler.runcall(call)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    else:
        call()
    sync()
    stamps["first_call"] = time.time()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        call()
    sync()
    stamps["three_calls"] = time.time()
    stamps["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    return stamps

mode = sys.argv[2]
if sys.argv[3] == "fork":
    r, w = os.pipe()
    stamps["fork"] = time.time()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child = work({"python": stamps["fork"]}, mode)
        os.write(w, json.dumps(child).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    stamps = {**stamps, **{k: v for k, v in json.loads(data).items() if k != "python"}, "forked_from": stamps["fork"]}
else:
    stamps = work(stamps, mode)
print("RESULT " + json.dumps(stamps), flush=True)
"""

PHASES = ["python", "torch", "modules", "device", "built", "first_call", "three_calls"]


def child_row(label: str, mode: str, how: str, env: dict[str, str], profile_to: Path | None = None) -> dict[str, Any]:
    spawned = time.time()
    done = subprocess.run([sys.executable, "-c", CHILD, BUILDER, mode, how], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    exited = time.time()
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{label}: exit {done.returncode}\n{done.stderr[-3000:]}")
    if profile_to is not None:
        profile_to.write_text(done.stderr)
    stamps = json.loads(lines[-1][len("RESULT "):])
    row: dict[str, Any] = {"step": label, "process_s": exited - spawned, "peak_gib": stamps["peak_gib"]}
    before = spawned
    for phase in PHASES:
        if phase in stamps:
            row[f"{phase}_s"] = stamps[phase] - before
            before = stamps[phase]
    if "forked_from" in stamps:
        row["fork_to_exit_s"] = exited - stamps["forked_from"]
    row["exit_s"] = exited - before
    return row


def import_torch_s() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=600)
    return time.perf_counter() - start


def children(repeat: int, suite_child: bool = True, out: Path | None = None,
             one_thread: bool = True) -> list[dict[str, Any]]:
    """The probe's rows: this process's compile, then each kind of fresh child (with one_thread, each start method
    again with TORCHINDUCTOR_COMPILE_THREADS=1: the same code under another setting) and, given out, a spawned
    child's first call under cProfile."""
    import torch

    from perftests.models.transformer import compile_time_builder
    from perftests.support.compile_time import from_scratch, no_grad, peak_gib_in_fresh_process, timed_call

    rows: list[dict[str, Any]] = []
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    fn, args = compile_time_builder()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with from_scratch(saving=True):
        torch._dynamo.reset()
        _, compile_s = timed_call(no_grad(torch.compile(fn), *args), device, from_empty=False)
        rows.append({"step": "this process compiles and saves (default)", "process_s": compile_s})
        env = {**base, **{k: os.environ[k] for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}}
        for _ in range(repeat):
            if suite_child:  # its peak is the device's: CUDA only
                start = time.perf_counter()
                peak = peak_gib_in_fresh_process(BUILDER, "default")
                rows.append({"step": "the suite's child (speedgate.launch)", "process_s": time.perf_counter() - start,
                             "peak_gib": peak})
            rows.append(child_row("spawned", "default", "spawn", env))
            if one_thread:
                rows.append(child_row("spawned, compile threads 1", "default", "spawn",
                                      {**env, "TORCHINDUCTOR_COMPILE_THREADS": "1"}))
            rows.append(child_row("forked after imports", "default", "fork", env))
            if one_thread:
                rows.append(child_row("forked after imports, compile threads 1", "default", "fork",
                                      {**env, "TORCHINDUCTOR_COMPILE_THREADS": "1"}))
        if out is not None:  # the first call of a spawned child under cProfile: its cumulative top 40
            rows.append(child_row("spawned, first call under cProfile", "default", "spawn",
                                  {**env, "PROBE_PROFILE": "1"}, out / "child_first_call.prof.txt"))
    return rows


MAX_AUTOTUNE = r"""
import json, sys, time, importlib
import torch
from perftests.support.compile_time import from_scratch, no_grad, timed_call
from torch._dynamo.utils import compile_times, counters
module, function = sys.argv[1].split(":")
fn, args = getattr(importlib.import_module(module), function)()
with from_scratch():
    _, seconds = timed_call(no_grad(torch.compile(fn, mode="max-autotune"), *args), "cuda", from_empty=False)
print(compile_times(repr="str", aggregate=True), file=sys.stderr)
print("RESULT " + json.dumps({"compile_s": seconds, "counters": {k: v for k, v in counters["inductor"].items()}}))
"""


def max_autotune(out: Path) -> dict[str, Any]:
    """test_compile_mode[max-autotune]'s compile from empty caches in a fresh process: its seconds, and where dynamo
    and inductor say they went (torch._dynamo.utils.compile_times, aggregated)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run([sys.executable, "-c", MAX_AUTOTUNE, BUILDER], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"max-autotune: exit {done.returncode}\n{done.stderr[-3000:]}")
    (out / "max_autotune_compile_times.txt").write_text(done.stderr)
    return dict(json.loads(lines[-1][len("RESULT "):]))


def pytest_runtest_teardown(item: Any) -> None:
    """As a pytest plugin (-p lab.fresh_process_probe, LAB_COMPILE_TIMES=FILE): after each test, where dynamo and
    inductor say its compiles went, appended to FILE; then their counts start again."""
    target = os.environ.get("LAB_COMPILE_TIMES")
    if not target or "torch._dynamo.utils" not in sys.modules:
        return
    from torch._dynamo.utils import compilation_time_metrics, compile_times

    with open(target, "a") as out:
        out.write(f"== {item.nodeid}\n{compile_times(repr='str', aggregate=True)}\n")
    compilation_time_metrics.clear()


SELECTIONS = ["test_compile_mode and max-autotune", ""]  # alone, then the whole file


def in_pytest(out: Path, selections: list[str]) -> list[dict[str, Any]]:
    """test_compile_modes.py in one pytest process per -k selection ("": the whole file): the compile seconds each
    reports, and where the compiles went per test (OUT/compile_times-*.txt)."""
    rows = []
    for label, select in ((k or "the file", ["-k", k] if k else []) for k in selections):
        with tempfile.TemporaryDirectory(prefix="lab-fresh-process-baselines-") as baselines:
            slug = "".join(c if c.isalnum() else "_" for c in label)
            report = out / f"report-{slug}.json"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "lab.fresh_process_probe",
                                   "-q", "perftests/test_compile_modes.py", *select, "--baseline-dir", baselines,
                                   "--speedgate-json", str(report), "--durations=10"],
                                  env={**os.environ, "LAB_COMPILE_TIMES": str(out / f"compile_times-{slug}.txt")},
                                  cwd=ROOT, capture_output=True, text=True, timeout=900)
            wall = time.perf_counter() - start
        metrics = ({f"{m['nodeid'].split('::')[-1]}::{m['name']}": m["value"] for m in json.loads(report.read_text())["metrics"]}
                   if report.exists() else {})
        rows.append({"step": label, "process_s": wall, "exit": done.returncode, "metrics": metrics,
                     "tail": done.stdout.strip().splitlines()[-14:]})
    return rows


def host() -> dict[str, Any]:
    """The host's CPU as the compile sees it: its model, the CPUs this process may use, the cgroup's quota."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    quota = Path("/sys/fs/cgroup/cpu.max")
    return {"cpu": model, "usable_cpus": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
            "cgroup_cpu_max": quota.read_text().strip() if quota.exists() else None}


def profiler_rows(calls: int = 10) -> list[dict[str, Any]]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from perftests.models.transformer import LARGE, build, token_ids
    from speedgate.integrity import profiled_busy
    from speedgate.timers.cuda import CudaTimer

    model = build(LARGE, "cuda", torch.bfloat16)
    (tokens,) = token_ids(LARGE, 8, (1024,), "cuda", 0)

    def fn() -> Any:
        with torch.no_grad():
            return model(tokens)

    fn()
    timer = CudaTimer(torch)
    rows = []
    for _ in range(2):
        start = time.perf_counter()
        timer.profile_calls(fn, calls)
        whole = time.perf_counter() - start
        torch.cuda.synchronize()
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        profiled = time.perf_counter() - start
        start = time.perf_counter()
        device = torch.autograd.DeviceType.CUDA
        parsed = [(e.time_range.start, e.time_range.end, getattr(e, "device_resource_id", None))
                  for e in prof.events() if e.device_type == device]
        events_s = time.perf_counter() - start
        start = time.perf_counter()
        raw = [(e.start_ns() / 1e3, e.end_ns() / 1e3, e.device_resource_id())
               for e in prof.profiler.kineto_results.events() if e.device_type() == device]
        raw_s = time.perf_counter() - start
        rows.append({"profile_calls_s": whole, "profiled_calls_s": profiled, "events_parse_s": events_s,
                     "raw_events_s": raw_s, "device_events": len(parsed), "raw_device_events": len(raw),
                     "busy_from_events": profiled_busy(parsed, calls), "busy_from_raw": profiled_busy(raw, calls)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--max-autotune", action="store_true", help="also time the max-autotune compile (GPU)")
    parser.add_argument("--only", choices=["max-autotune"], help="only the max-autotune compile: fresh, then in pytest")
    parser.add_argument("--select", action="append", help="with --only: a -k selection of test_compile_modes.py run "
                        "in a pytest process of its own ('' the whole file; default: max-autotune alone, the file)")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"host": host()}
    print("host:", result["host"], flush=True)
    if options.only == "max-autotune":
        result["max_autotune"] = max_autotune(options.out)
        print("max-autotune compile, fresh process:", json.dumps(result["max_autotune"]), flush=True)
        result["in_pytest"] = in_pytest(options.out, options.select or SELECTIONS)
        for row in result["in_pytest"]:
            print(json.dumps(row, indent=1), flush=True)
        (options.out / "fresh_process_probe.json").write_text(json.dumps(result, indent=1))
        return 0
    result["import_torch_s"] = [import_torch_s(), import_torch_s()]
    print("import torch in a fresh process:", " ".join(f"{s:.2f} s" for s in result["import_torch_s"]), flush=True)
    result["children"] = children(options.repeat, out=options.out)
    keys = ["process_s", *[f"{p}_s" for p in PHASES], "exit_s", "fork_to_exit_s", "peak_gib"]
    print("| step | " + " | ".join(keys) + " |")
    for row in result["children"]:
        print(f"| {row['step']} | " + " | ".join(f"{row[k]:.2f}" if k in row else "-" for k in keys) + " |", flush=True)
    result["profiler"] = profiler_rows()
    for row in result["profiler"]:
        print(json.dumps(row), flush=True)
    summary = {k: statistics.median(r[k] for r in result["profiler"]) for k in ("events_parse_s", "raw_events_s")}
    print("median trace reading:", summary, flush=True)
    if options.max_autotune:
        result["max_autotune"] = max_autotune(options.out)
        print("max-autotune compile:", json.dumps(result["max_autotune"]), flush=True)
    (options.out / "fresh_process_probe.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
