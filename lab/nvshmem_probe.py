"""Whether this stack runs the chapter's NVSHMEM Triton example: a Triton kernel that issues NVSHMEM puts from the
device, through PyTorch's own device functions (torch.distributed._symmetric_memory._nvshmem_triton) on symmetric
memory with the NVSHMEM backend.

    python lab/nvshmem_probe.py [--mb 128] [--world N] [--json FILE] [--source DIR]
    (on a machine with N >= 2 GPUs)

Every rank walks the same steps and records each one's outcome (the value, or the exact error and the end of its
traceback): NVSHMEM available, the device-function module and what it offers, the NVSHMEM backend, two symmetric
buffers, a put kernel compiled and launched (each CTA puts its block of the rank's buffer into the next rank's), the
result checked element for element, and then, if all that held, the put kernel timed against a copy-engine copy of
the same bytes into the peer's buffer (CUDA events, median, the slowest rank's). --source DIR keeps the module's
source as this stack ships it, so that the next kernel is written against the API that is there. Prints one line a
step and a verdict; exits 0 whether or not the stack refused (the refusal is the finding), 2 if the ranks failed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BLOCK = 1 << 20  # elements a CTA puts (2 MiB of bf16)


class Steps:
    """The outcome of each step, in order; a step that raises is recorded and ends the walk."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - the refusal is what the probe reports
            self.rows.append({"step": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
                              "traceback": traceback.format_exc()[-3000:]})
            raise Stop from exc
        plain = isinstance(value, (bool, int, float, str, list, dict, type(None)))
        self.rows.append({"step": name, "ok": True, "value": value if plain else type(value).__name__})
        return value


class Stop(Exception):
    """A step failed; the rows say which and why."""


def verdict(rows: list[dict[str, Any]]) -> str:
    """One line: how far the walk got."""
    failed = [r for r in rows if not r["ok"]]
    if not rows:
        return "nothing ran"
    if failed:
        return f"stopped at '{failed[0]['step']}': {failed[0]['error'].splitlines()[0]}"
    return f"all {len(rows)} steps held"


def probe(numel: int, reps: int = 20, source_dir: str | None = None) -> dict:
    import torch
    import torch.distributed as dist

    from perftests.support import nccl_cases
    from speedgate.distributed import slowest, timed_on_rank

    rank, world, device = nccl_cases.setup()
    steps = Steps()
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    found: dict[str, Any] = {"rank": rank, "world": world, "gpu": gpu,
                             "torch": torch.__version__, "steps": steps.rows}
    try:
        import triton
        import triton.language as tl

        found["triton"] = triton.__version__
        import torch.distributed._symmetric_memory as symm_mem

        steps.run("symm_mem.is_nvshmem_available()", lambda: bool(symm_mem.is_nvshmem_available()))
        nvshmem = steps.run("import _nvshmem_triton", lambda: __import__(
            "torch.distributed._symmetric_memory._nvshmem_triton", fromlist=["_"]))
        names = steps.run("what it offers", lambda: sorted(n for n in dir(nvshmem) if not n.startswith("_")))
        if source_dir and rank == 0:
            Path(source_dir, "_nvshmem_triton.py").write_text(inspect.getsource(nvshmem))
        steps.run("symm_mem.set_backend('NVSHMEM')", lambda: symm_mem.set_backend("NVSHMEM"))
        group = dist.group.WORLD.group_name

        def buffers() -> tuple[torch.Tensor, torch.Tensor]:
            src = symm_mem.empty(numel, dtype=torch.bfloat16, device=device)
            dst = symm_mem.empty(numel, dtype=torch.bfloat16, device=device)
            symm_mem.rendezvous(src, group=group)
            symm_mem.rendezvous(dst, group=group)
            return src, dst

        src, dst = steps.run("two symmetric buffers, rendezvous", buffers)
        decorate = getattr(nvshmem, "requires_nvshmem", lambda f: f)

        def build() -> Any:
            @decorate
            @triton.jit
            def put_kernel(dst_ptr, src_ptr, peer, BLOCK: tl.constexpr):
                offset = tl.program_id(0) * BLOCK
                nvshmem.put(dst_ptr + offset, src_ptr + offset, BLOCK, peer)

            return put_kernel

        put_kernel = steps.run(f"put kernel defined ({'requires_nvshmem' if 'requires_nvshmem' in names else 'no decorator'})",
                               build)
        peer = (rank + 1) % world
        src.copy_(torch.arange(numel, device=device, dtype=torch.float32).remainder(251).add(rank * 1000)
                  .to(torch.bfloat16))
        dst.fill_(float("nan"))
        torch.cuda.synchronize()
        dist.barrier()
        grid = (numel // BLOCK,)

        def put() -> None:
            put_kernel[grid](dst, src, peer, BLOCK=BLOCK)

        def launch_once() -> str:
            put()  # the kernel's end, then the barrier, complete its puts
            torch.cuda.synchronize()
            dist.barrier()
            return "launched"

        steps.run("put kernel compiled and launched", launch_once)
        sender = (rank - 1) % world
        expected = (torch.arange(numel, device=device, dtype=torch.float32).remainder(251).add(sender * 1000)
                    .to(torch.bfloat16))

        def check() -> int:
            wrong = int((dst != expected).sum())
            if wrong:
                raise AssertionError(f"{wrong} of {numel} elements are not rank {sender}'s")
            return wrong

        steps.run("the peer's elements arrived", check)
        handle = symm_mem.rendezvous(dst, group=group)

        def timing() -> dict[str, float]:
            peer_dst = handle.get_buffer(peer, (numel,), torch.bfloat16)
            copy = lambda: peer_dst.copy_(src)  # noqa: E731 - a copy engine moves it over NVLink
            rows = {}
            for name, fn in (("nvshmem put kernel", put), ("copy-engine copy to the peer", copy)):
                for _ in range(3):
                    fn()
                median = statistics.median(timed_on_rank(fn) for _ in range(reps))
                ms = slowest([median])[0]
                rows[name] = {"ms": ms, "GB/s": 2 * numel / ms / 1e6}
            return rows

        found["timing"] = steps.run("timed beside a copy-engine copy", timing)
    except Stop:
        pass
    finally:
        found["verdict"] = verdict(steps.rows)
        nccl_cases.teardown()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--mb", type=int, default=128, help="MiB of bf16 each rank puts (a multiple of 2)")
    parser.add_argument("--world", type=int, default=None, help="ranks (default: every visible GPU)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--source", type=Path, metavar="DIR", help="keep the device-function module's source here")
    args = parser.parse_args()
    import torch

    from speedgate.launch import RankError, run_ranks

    world = args.world or torch.cuda.device_count()
    if world < 2:
        print(f"nvshmem_probe: needs 2 or more GPUs, {world} visible", file=sys.stderr)
        return 2
    if args.source:
        args.source.mkdir(parents=True, exist_ok=True)
    numel = args.mb * 2**20 // 2 // BLOCK * BLOCK
    kwargs = {"numel": numel, "source_dir": str(args.source.resolve()) if args.source else None}
    try:
        results = run_ranks("lab.nvshmem_probe:probe", world, kwargs, timeout_s=150)
    except RankError as exc:
        print(f"nvshmem_probe: the ranks failed: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    first = results[0]
    print(f"{world} x {first['gpu']}, torch {first['torch']}, triton {first.get('triton')}, {numel * 2 / 2**20:.0f} MiB a rank")
    for r in results:
        for row in r["steps"]:
            shown = row["value"] if row["ok"] else row["error"]
            print(f"rank {r['rank']}: {'ok  ' if row['ok'] else 'FAIL'} {row['step']}: {str(shown)[:300]}")
        for name, t in (r.get("timing") or {}).items():
            print(f"rank {r['rank']}: {name}: {t['ms']:.3f} ms, {t['GB/s']:.0f} GB/s")
        print(f"rank {r['rank']}: {r['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
