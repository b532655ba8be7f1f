"""Fault drill (GPU): five perf cases, three of which fault (an illegal memory access, a kernel that never finishes,
an out-of-memory), run serially and under xdist with pytest-timeout, to show what the gate does after each.

Usage: python lab/fault_drill.py [--timeout 30] [--limit 300] [--keep DIR]     (one command, on a GPU machine)
       python lab/fault_drill.py --cpu                                          (dry: writes the project, collects it)

Writes a small pytest project into a temporary folder and runs pytest on it, printing each run's command, exit code,
time and output tail, then whether each expectation held. Runs:
  serial    the out-of-bounds case fails with its own error; the cases after it are "not run" naming it
  xdist     -n 1: every fault fails with its own error; the worker is replaced after the illegal access and the hang;
            the last case passes in a clean context
  serial-hang    without the out-of-bounds case: pytest-timeout's thread method ends the whole serial run at the hang
  signal-hang    the hang under --timeout-method signal: the handler never runs while the host waits on the GPU, so
                 the drill kills it at its own limit
Every run is killed (its process group) if it outlives its share of --limit.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = '''
"""The fault drill's cases (written by lab/fault_drill.py)."""
import torch
import triton
import triton.language as tl

N = 1 << 20
FAR = 2**40  # elements past the buffer: 4 TiB, far outside anything mapped on the device


@triton.jit
def _shifted_add_one_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs.to(tl.int64) + SHIFT, mask=mask)  # SHIFT=FAR: an illegal address
    tl.store(out_ptr + offs, x + 1, mask=mask)


@triton.jit
def _spin_kernel(flag_ptr, out_ptr):
    count = 0
    while tl.load(flag_ptr, volatile=True) == 0:  # volatile: re-read every time; the flag stays 0, so it never ends
        count += 1
    tl.store(out_ptr, count)


def add_one(x, shift=0):
    out = torch.empty_like(x)
    _shifted_add_one_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), SHIFT=shift, BLOCK=1024)
    return out


def test_passes_first(perf):
    x = torch.randn(N, device="cuda")
    perf.compare(lambda: x + 1, lambda: add_one(x))


def test_out_of_bounds_read(perf):
    x = torch.randn(N, device="cuda")
    perf.compare(lambda: x + 1, lambda: add_one(x, shift=FAR))


def test_kernel_never_finishes(perf):
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.empty_like(flag)
    _spin_kernel[(1,)](flag, out)
    torch.cuda.synchronize()  # the host waits here for ever


def test_out_of_memory(perf):
    held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB the failed test holds
    torch.empty(10 * 2**40, dtype=torch.uint8, device="cuda")  # 10 TiB
    del held


def test_passes_after(perf):
    x = torch.randn(N, device="cuda")
    assert torch.cuda.memory_reserved() < (1 << 30), "the 1 GiB the out-of-memory case held was not released"
    perf.compare(lambda: x + 1, lambda: add_one(x))
'''

INI = "[pytest]\naddopts = -p no:cacheprovider -p no:randomly -rA\n"
MODULE = "test_drill.py"


def case(name: str) -> str:
    return f"{MODULE}::{name}"


def write_project(folder: Path) -> None:
    (folder / MODULE).write_text(CASES)
    (folder / "pytest.ini").write_text(INI)


def pytest_cmd() -> list[str]:
    """pytest with this checkout's speedgate (PYTHONPATH, below); -p only when no installed copy registers it."""
    cmd = [sys.executable, "-m", "pytest"]
    if not any(ep.name == "speedgate" for ep in importlib.metadata.entry_points(group="pytest11")):
        cmd += ["-p", "speedgate.plugin"]
    return cmd


def run(name: str, args: list[str], folder: Path, limit_s: float, tail_chars: int = 8000) -> tuple[int | None, str]:
    """Run pytest in folder (its own process group, killed whole past limit_s); print and return (exit code, output).
    The exit code is None when the drill had to kill it."""
    cmd = pytest_cmd() + args
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugin"), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    env["COLUMNS"] = "240"  # the short summary lines (-rA) whole, not cut at 80 characters
    print(f"\n{'=' * 30} run {name}: {' '.join(args)} (limit {limit_s:.0f} s) {'=' * 30}", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=max(limit_s, 1.0))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the xdist workers too, and a process spinning on the GPU
        output, _ = proc.communicate()
        code = None
    took = time.monotonic() - start
    tail = output[-tail_chars:]
    print(("...\n" if len(output) > tail_chars else "") + tail)
    print(f"--- run {name}: {'KILLED by the drill' if code is None else f'exit {code}'} after {took:.0f} s", flush=True)
    return code, output


def check(results: list[tuple[str, bool]], what: str, ok: bool) -> None:
    results.append((what, ok))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=30.0, help="pytest-timeout's per-test limit, seconds (30)")
    parser.add_argument("--limit", type=float, default=300.0, help="the whole drill's wall limit, seconds (300)")
    parser.add_argument("--keep", type=Path, help="write the project here and keep it (default: a temporary folder)")
    parser.add_argument("--cpu", action="store_true", help="dry run: write the project and collect it; run nothing")
    opts = parser.parse_args()
    if opts.keep:
        opts.keep.mkdir(parents=True, exist_ok=True)
        return drill(opts.keep, opts)
    with tempfile.TemporaryDirectory(prefix="speedgate-fault-drill-") as tmp:
        return drill(Path(tmp), opts)


def drill(folder: Path, opts: argparse.Namespace) -> int:
    write_project(folder)
    print(f"fault drill project: {folder}")
    if opts.cpu:
        code, output = run("collect", ["--collect-only", "-q"], folder, opts.limit)
        ok = code == 0 and all(case(n) in output for n in ("test_passes_first", "test_out_of_bounds_read",
                                                            "test_kernel_never_finishes", "test_out_of_memory",
                                                            "test_passes_after"))
        print(f"\ndry run: {'the project collects its 5 cases' if ok else 'FAILED to collect the 5 cases'}; the fault "
              "runs need a GPU")
        return 0 if ok else 1
    if importlib.util.find_spec("pytest_timeout") is None:
        print("pytest-timeout is not installed: pip install pytest-timeout")
        return 2
    deadline = time.monotonic() + opts.limit
    timeout = ["--timeout", f"{opts.timeout:g}", "--timeout-method", "thread"]
    results: list[tuple[str, bool]] = []

    def left(share: float) -> float:
        return min(share, deadline - time.monotonic())

    # 1. Serial: the illegal access poisons the process; what follows is not run, and says why.
    code, out = run("serial", timeout, folder, left(opts.timeout + 90))
    check(results, "serial: the out-of-bounds case fails with its own CUDA error",
          re.search(rf"FAILED {re.escape(case('test_out_of_bounds_read'))} - .*(illegal memory access|CUDA error)", out)
          is not None)
    check(results, "serial: every later case is reported not run, naming the culprit",
          all(re.search(rf"ERROR {re.escape(case(n))} - Failed: not run: the CUDA context of this process was poisoned "
                        rf"by {re.escape(case('test_out_of_bounds_read'))}", out)
              for n in ("test_kernel_never_finishes", "test_out_of_memory", "test_passes_after")))

    # 2. xdist, one worker: a fresh worker after each fault that kills the context or the process.
    if importlib.util.find_spec("xdist") is None:
        check(results, "xdist: pytest-xdist is installed", False)
    else:
        code, out = run("xdist", ["-n", "1", *timeout, "-o", f"faulthandler_timeout={max(opts.timeout - 5, 1):g}"],
                        folder, left(opts.timeout + 120))
        check(results, "xdist: the out-of-bounds case fails with its own CUDA error",
              re.search(rf"FAILED {re.escape(case('test_out_of_bounds_read'))} - .*(illegal memory access|CUDA error)",
                        out) is not None)
        check(results, "xdist: the worker that ran it ended and was replaced",
              "speedgate: ending xdist worker gw0" in out and "replacing crashed worker" in out)
        check(results, "xdist: the hang is ended by pytest-timeout and named",
              case("test_kernel_never_finishes") in out and "past pytest-timeout's per-test limit" in out)
        check(results, "xdist: the out-of-memory case fails with its own error",
              re.search(rf"FAILED {re.escape(case('test_out_of_memory'))} - .*out of memory", out) is not None)
        check(results, "xdist: the last case passes in a clean context",
              f"PASSED {case('test_passes_after')}" in out)

    # 3. Serial, no out-of-bounds case: at the hang, pytest-timeout's thread method ends the whole process.
    code, out = run("serial-hang", [*timeout, "-k", "not out_of_bounds"], folder, left(opts.timeout + 60))
    check(results, "serial-hang: pytest-timeout ends the process at the hang (exit 1, its Timeout banner)",
          code == 1 and "Timeout" in out and "test_kernel_never_finishes" in out)

    # 4. The signal method cannot interrupt a host blocked on the GPU: the drill has to kill it.
    code, out = run("signal-hang", ["--timeout", "10", "--timeout-method", "signal", "-k", "never_finishes"], folder,
                    left(40))
    check(results, "signal-hang: --timeout-method signal did not end the hang within 40 s (killed by the drill)",
          code is None)

    print("\n" + "=" * 30 + " fault drill: expectations " + "=" * 30)
    for what, ok in results:
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
