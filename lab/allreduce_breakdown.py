"""Where the time of the quantized all-reduce goes: each stage timed by itself on every rank (CUDA events after
warm-up, a barrier before each call, median of 30 calls, the slowest rank's median), next to NCCL's bf16
all-reduce and the raw collectives at the same byte counts.

    python lab/allreduce_breakdown.py [--mb 256] [--world N] [--pieces 1 2 4 8] [--graph] [--profile DIR]
    (on a machine with N >= 2 GPUs)

Prints a Markdown table: stage, ms, and GB/s of the bytes each rank's buffer holds, and the host's time to queue one
call of each P2P form. With --graph, each P2P form is also captured once as a CUDA graph and timed as its replay (or
the capture's error is printed). With --profile, each piece count of the P2P form is also traced (torch.profiler, 5
calls, every rank; Chrome traces in DIR) and summarized per call and rank: the host's time to queue a call, the device span of a call, and by kind of device work (copies,
symmetric-memory barriers, the three quantization kernels, the rest) how many ran and how long the device was busy
with them: where the cost that grows with the piece count goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


KINDS = (("copy", ("memcpy", "memset")), ("barrier", ("barrier",)), ("quantize", ("_quantize",)),
         ("reduce_requantize", ("reduce_requantize",)), ("dequantize", ("dequantize",)))


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, marks in KINDS:
        if any(mark in lowered for mark in marks):
            return kind
    return "other"


def summarize_trace(events: list[tuple[str, float, float, object]], calls: int) -> dict:
    """Per call, from (name, start us, end us, stream) of every device activity of `calls` traced calls: the span
    from the first activity to the last, the time the device was busy with anything, and per kind of work (kind_of)
    how many activities and how long the device was busy with them; and how many streams took part."""
    from speedgate.integrity import busy_ms  # the union of intervals, in their unit (here us), as the gate counts it

    if not events:
        return {"span_ms": 0.0, "busy_ms": 0.0, "streams": 0, "kinds": {}}
    spans = [(start, end) for _, start, end, _ in events]
    kinds: dict[str, dict[str, float]] = {}
    for kind in sorted({kind_of(name) for name, *_ in events}):
        mine = [(start, end) for name, start, end, _ in events if kind_of(name) == kind]
        kinds[kind] = {"count": len(mine) / calls, "busy_ms": busy_ms(mine) / 1e3 / calls}
    return {"span_ms": (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e3 / calls,
            "busy_ms": busy_ms(spans) / 1e3 / calls, "streams": len({stream for *_, stream in events}), "kinds": kinds}


def profile_p2p(forms: dict, x: object, out: object, directory: Path, rank: int, calls: int = 5) -> dict:
    """Each P2P form traced over `calls` calls on this rank (after warm-up and a barrier): its Chrome trace in
    directory, its summary (summarize_trace) and the host's milliseconds to queue one call."""
    import time

    import torch
    import torch.distributed as dist
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    found = {}
    for k, form in forms.items():
        for _ in range(3):
            form(x, out)
        torch.cuda.synchronize()
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            started = time.perf_counter()
            for _ in range(calls):
                form(x, out)
            queued = (time.perf_counter() - started) * 1e3 / calls
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(directory / f"rank{rank}_p2p_{k}pieces.json"))
        events = [(e.name, e.time_range.start, e.time_range.end, getattr(e, "device_resource_id", None))
                  for e in prof.events() if e.device_type == DeviceType.CUDA]
        found[k] = {"host_queue_ms": queued, **summarize_trace(events, calls)}
    return found


def graphed(fn: Callable[[], object]) -> Callable[[], object] | str:
    """fn captured once as a CUDA graph (after a warm-up call on a side stream, as capture wants): its replay; or,
    where capture fails (a collective or barrier that cannot be captured), why, as one line."""
    try:
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay
    except Exception as exc:  # noqa: BLE001 - the refusal is the finding
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


def host_queue_ms(fn: Callable[[], object], reps: int) -> float:
    """The host's median milliseconds to queue one call of fn (the device idle and every rank ready before each)."""
    import time

    import torch
    import torch.distributed as dist

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        dist.barrier()
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def stages(numel: int, reps: int = 30, pieces: tuple[int, ...] = (1, 4), profile_dir: str | None = None,
           graph: bool = False) -> dict:
    import torch
    import torch.distributed as dist

    from perftests.kernels import allreduce, quant
    from perftests.support import nccl_cases
    from speedgate.distributed import slowest, timed_on_rank

    rank, world, device = nccl_cases.setup()
    try:
        x = nccl_cases.inputs(numel, rank, device)
        ar = allreduce.QuantizedAllReduce(numel, world, device)
        p2p = {k: allreduce.P2PQuantizedAllReduce(numel, world, device, pieces=k) for k in pieces}
        out = torch.empty_like(x)
        send, recv, reduced, gathered = ar.send[0], ar.recv[0], ar.reduced[0], ar.gathered[0]
        scratch = x.clone()
        half = torch.empty(numel // 2, dtype=torch.bfloat16, device=device)
        a2a_bf16_out = torch.empty_like(x)
        packed = send.buffer.numel()
        steps = {
            "nccl all_reduce bf16 (the reference)": (lambda: dist.all_reduce(scratch), 2 * numel),
            "nccl all_reduce bf16, half the elements (the int8 bytes)": (lambda: dist.all_reduce(half), numel),
            "quantize kernel": (lambda: quant.quantize(x, packed=send), 2 * numel),
            "all_to_all int8 codes + scales": (lambda: dist.all_to_all_single(recv.buffer, send.buffer), packed),
            "reduce + requantize kernel": (lambda: quant.reduce_requantize(packed=recv, out=reduced), packed),
            "all_gather int8 codes + scales": (lambda: allreduce.all_gather(gathered.buffer, reduced.buffer), packed),
            "dequantize kernel": (lambda: quant.dequantize(packed=gathered, out=out), 2 * numel),
            "quantized all-reduce, whole": (lambda: ar(x, out), 2 * numel),
            **{f"quantized all-reduce over P2P copies (copy engines), {k} piece(s)": ((lambda f=f: f(x, out)), 2 * numel)
               for k, f in p2p.items()},
            "all_to_all bf16 (for comparison)": (lambda: dist.all_to_all_single(a2a_bf16_out, x), 2 * numel),
        }
        found: dict = {"world": world, "numel": numel, "gpu": torch.cuda.get_device_name(), "rank": rank}
        # The host's time to queue one call of each P2P form, without a profiler's own host cost.
        found["host_queue_ms"] = {str(k): host_queue_ms(lambda f=f: f(x, out), reps) for k, f in p2p.items()}
        if graph:  # each P2P form as one CUDA graph replay: the host's per-piece launches gone
            found["graph_errors"] = {}
            for k, f in p2p.items():
                replay = graphed(lambda f=f: f(x, out))
                if isinstance(replay, str):
                    found["graph_errors"][str(k)] = replay
                else:
                    steps[f"quantized all-reduce over P2P copies, {k} piece(s), one CUDA graph replay"] = (replay, 2 * numel)
        rows = {}
        for name, (fn, nbytes) in steps.items():
            for _ in range(3):
                fn()
            median = statistics.median(timed_on_rank(fn) for _ in range(reps))
            rows[name] = {"ms": slowest([median])[0], "bytes": nbytes}
        found["rows"] = rows
        if profile_dir:
            found["profile"] = profile_p2p(p2p, x, out, Path(profile_dir), rank)
        return found
    finally:
        nccl_cases.teardown()


def main() -> None:
    import torch

    from speedgate.launch import run_ranks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--world", type=int, default=torch.cuda.device_count())
    parser.add_argument("--json", type=Path)
    parser.add_argument("--pieces", type=int, nargs="+", default=[1, 4], help="piece counts of the P2P form to time")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="trace each piece count too (Chrome traces here)")
    parser.add_argument("--graph", action="store_true", help="time each P2P form as one CUDA graph replay too")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    kwargs = {"numel": args.mb * 2**20 // 2, "pieces": args.pieces, "graph": args.graph,
              "profile_dir": str(args.profile.resolve()) if args.profile else None}
    results = run_ranks("lab.allreduce_breakdown:stages", args.world, kwargs, timeout_s=300)
    result = results[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"{args.world} x {result['gpu']}, {args.mb} MB of bf16 per rank")
    print("| stage | ms | GB/s |\n| --- | ---: | ---: |")
    parts = 0.0
    for name, row in result["rows"].items():
        if name.endswith("kernel") or name.startswith(("all_to_all int8", "all_gather")):
            parts += row["ms"]
        print(f"| {name} | {row['ms']:.3f} | {row['bytes'] / row['ms'] / 1e6:.0f} |")
    print(f"| sum of the quantized stages, run one at a time | {parts:.3f} | - |")
    for k, ms in result.get("host_queue_ms", {}).items():
        print(f"host time to queue one call of the P2P form, {k} piece(s): {ms:.3f} ms (rank 0, no profiler)")
    for k, why in result.get("graph_errors", {}).items():
        print(f"P2P form, {k} piece(s): no CUDA graph: {why}")
    if args.profile:
        print(profile_table(results))


def profile_table(results: list[dict]) -> str:
    """The traced P2P calls, one row per rank and piece count: per call, what the host took to queue it, the
    device's span and busy time, and per kind of work its count and busy milliseconds."""
    kinds = sorted({kind for r in results for p in r.get("profile", {}).values() for kind in p["kinds"]})
    lines = ["| rank | pieces | host queue ms | device span ms | busy ms | streams | "
             + " | ".join(f"{kind}: n, ms" for kind in kinds) + " |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---" for _ in kinds) + " |"]
    for r in results:
        for k, p in sorted(r.get("profile", {}).items(), key=lambda kv: int(kv[0])):
            cells = [f"{p['kinds'][kind]['count']:g}, {p['kinds'][kind]['busy_ms']:.3f}" if kind in p["kinds"] else "-"
                     for kind in kinds]
            lines.append(f"| {r.get('rank', '?')} | {k} | {p['host_queue_ms']:.3f} | {p['span_ms']:.3f} | {p['busy_ms']:.3f} | "
                         f"{p['streams']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
