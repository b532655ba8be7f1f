"""Run one function on N ranks, each in its own process (the way torchrun starts them), with a deadline.

run_ranks("package.module:function", world_size, payload) starts `python -m speedgate.rank` once per rank with
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (what torch.distributed's env:// init reads), calls
function(**payload) in each, and returns their JSON results in rank order. A rank that raises, exits, or outlives
the deadline fails the whole call with a RankError that names the rank and carries its traceback (the tail of its
stderr); every rank's process group is killed before it returns, so nothing is left behind. A collective is only
as alive as its slowest member: once one rank fails, the others are given a few seconds and then killed.

Imports nothing heavy: the children import torch, the parent does not have to.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# After the first rank fails, how long the others get to finish (or fail with their own message) before the kill.
GRACE_S = 10.0
STDERR_TAIL = 4000


class RankError(AssertionError):
    """One or more ranks failed, hung or died; the message names each and quotes its error."""


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    returncode: int | None  # None: killed at the deadline (or after another rank failed)
    stderr_tail: str
    result: Any = None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3.0)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-STDERR_TAIL:].strip()


def _error_summary(stderr: str) -> str:
    """The last exception line of a traceback, else the last line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith(" ") and ("Error" in line or "Exception" in line or ":" in line):
            return line.strip()
    return lines[-1].strip() if lines else "(no output on stderr)"


def run_ranks(
    target: str,
    world_size: int,
    payload: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    python: Sequence[str] | None = None,
) -> list[Any]:
    """function(**payload) on world_size ranks; their return values (JSON) in rank order, or RankError."""
    if ":" not in target:
        raise ValueError(f"speedgate: target {target!r} must be 'package.module:function'")
    if world_size < 1:
        raise ValueError(f"speedgate: world_size must be at least 1, got {world_size}")
    with tempfile.TemporaryDirectory(prefix="speedgate-ranks-") as tmp:
        folder = Path(tmp)
        (folder / "payload.json").write_text(json.dumps(dict(payload or {})))
        base_env = dict(os.environ if env is None else env)
        # The children import the test's modules the way the parent does.
        base_env["PYTHONPATH"] = os.pathsep.join(filter(None, [*sys.path, base_env.get("PYTHONPATH", "")]))
        for attempt in range(1, PORT_TRIES + 1):
            outcomes = _run_once(target, world_size, folder, base_env, free_port(), timeout_s, python)
            failed = [o for o in outcomes if o.returncode != 0]
            if not (failed and attempt < PORT_TRIES and any(_port_taken(o.stderr_tail) for o in failed)):
                break
    if failed:
        raise RankError(_failure_message(target, world_size, failed, timeout_s))
    return [o.result for o in outcomes]


# The master port is one the OS called free a moment before the ranks bind it: another process's connection can take
# it in between (NCCL's and the store's own sockets use the same range), and rank 0 then fails to listen. The ranks
# are started again on another port, this many times in all.
PORT_TRIES = 3
_PORT_TAKEN = ("EADDRINUSE", "Address already in use")


def _port_taken(stderr_tail: str) -> bool:
    return any(mark in stderr_tail for mark in _PORT_TAKEN)


def _run_once(target: str, world_size: int, folder: Path, base_env: Mapping[str, str], port: int, timeout_s: float,
              python: Sequence[str] | None) -> list[RankOutcome]:
    """The ranks started once on this master port, waited for (or killed); their outcomes in rank order."""
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            rank_env = dict(base_env)
            rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                            LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            with open(folder / f"rank{rank}.err", "wb") as err:
                procs.append(subprocess.Popen(
                    [*(python or [sys.executable]), "-m", "speedgate.rank", target, str(folder / "payload.json"),
                     str(folder / f"rank{rank}.json")],
                    env=rank_env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                ))
        return _wait(procs, folder, timeout_s)
    finally:
        for proc in procs:
            _kill_group(proc)


def _wait(procs: list[subprocess.Popen], folder: Path, timeout_s: float) -> list[RankOutcome]:
    deadline = time.monotonic() + timeout_s
    first_failure: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if first_failure is None and any(c not in (None, 0) for c in codes):
            first_failure = time.monotonic()
        done = all(c is not None for c in codes)
        now = time.monotonic()
        if done or now >= deadline or (first_failure is not None and now - first_failure >= GRACE_S):
            break
        time.sleep(0.05)
    outcomes = []
    for rank, proc in enumerate(procs):
        code = proc.poll()
        if code is None:
            _kill_group(proc)
        result = None
        if code == 0:
            result_path = folder / f"rank{rank}.json"
            try:
                result = json.loads(result_path.read_text())["result"]
            except (OSError, ValueError, KeyError) as exc:
                code = -1
                (folder / f"rank{rank}.err").open("a").write(f"\nspeedgate: rank {rank} exited 0 but left no result: {exc}\n")
        outcomes.append(RankOutcome(rank, code, _tail(folder / f"rank{rank}.err"), result))
    return outcomes


def _failure_message(target: str, world_size: int, failed: list[RankOutcome], timeout_s: float) -> str:
    parts = [f"speedgate: {target} on {world_size} ranks: {len(failed)} rank(s) failed"]
    for o in failed:
        if o.returncode is None:
            what = f"rank {o.rank}: did not finish within {timeout_s:g} s (or after another rank failed), killed"
        elif o.returncode < 0:
            what = f"rank {o.rank}: died with signal {-o.returncode}" if o.returncode != -1 else f"rank {o.rank}: no result"
        else:
            what = f"rank {o.rank}: exited with code {o.returncode}: {_error_summary(o.stderr_tail)}"
        parts.append(what)
    # The full traceback of the first rank that raised (the others usually fail because it left).
    raised = [o for o in failed if o.returncode not in (None,) and o.returncode > 0]
    if raised:
        parts.append(f"--- rank {raised[0].rank} stderr (tail) ---\n{raised[0].stderr_tail}")
    elif failed[0].stderr_tail:
        parts.append(f"--- rank {failed[0].rank} stderr (tail) ---\n{failed[0].stderr_tail}")
    return "\n".join(parts)
