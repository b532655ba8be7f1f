"""Multi-GPU cases, run inside the ranks that speedgate.launch.run_ranks starts (one process per GPU, NCCL).

All-reduce of a bf16 tensor, three ways:
  nccl_bf16        dist.all_reduce of the bf16 tensor (NCCL's ring or tree: each rank sends and receives about
                   2 (W - 1) / W of the tensor's bytes)
  quantized        block-wise int8 (perftests.kernels.quant): quantize; all_to_all so that rank j receives every
                   rank's codes and scales for chunk j; dequantize, sum in fp32 and requantize chunk j (one
                   kernel); all_gather the reduced chunks; dequantize. Each rank moves 2 (W - 1) / W of the int8
                   bytes plus the scales: 0.502 of the bf16 bytes.
  pipelined        the same in P pieces: the kernels of one piece run on the compute stream while the collectives
                   of the piece before are on the wire (NCCL runs them on its own stream).

Error bound of the quantized all-reduce, element by element, against an fp32 all-reduce of the same bf16 inputs:
each rank's input is off by at most half its block's scale (a_r / 254, a_r = the block's max |x_r|); the
requantized sum is off by at most half of its own scale (<= (A + sum_r a_r / 254) / 254, A = the exact sum's block
max); the bf16 output rounds once more (<= 2^-9 of the value, which is within the exact value plus the two errors
above); fp32 arithmetic in the kernels (the reciprocal, the products, the sum) adds relative errors near 2^-24 of the
block's scales. The check asserts, on every element,
    |y - y_fp32| <= (E1 + E2) (1 + 2^-8) + 2^-8 |y_fp32| + 1e-5 (sum_r a_r + A),  E1 = sum_r a_r / 254,
    E2 = (A + E1) / 254.
It is a worst case: E1 and E2 are sums of maxima of rounding errors, so over millions of elements the largest
error comes within a few percent of it (on the CPU, 32k elements: 0.96 of the bound).

Timing: perftests-side functions run on every rank under speedgate.distributed.measure_across_ranks (a barrier
before each call, the slowest rank's time per call).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch
import torch.distributed as dist

from perftests.kernels import quant

# Keep NVLink multicast off (the GPU machines' rule; NCCL would otherwise try NVLS on H100/H200 systems).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _all_gather(out: torch.Tensor, inp: torch.Tensor, async_op: bool = False) -> Any:
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # 2.13 renamed it
    return gather(out, inp, async_op=async_op)


def setup() -> tuple[int, int, torch.device]:
    for name, value in SAFE_ENV.items():
        os.environ.setdefault(name, value)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return rank, world, device


def teardown() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class QuantizedAllReduce:
    """Buffers for one tensor size, allocated once; __call__(x, out) writes the all-reduced sum of x into out.

    Per piece, one all_to_all and one all_gather, each of a packed int8 buffer whose segments hold a chunk's codes
    and then its scales (perftests.kernels.quant.Packed): separate collectives for the scales cost about 0.04 ms
    each at 256 MB on 2 H200s, for 0.4% of the bytes.
    """

    def __init__(self, numel: int, world: int, device: torch.device, pieces: int = 1) -> None:
        if numel % (world * pieces * quant.QBLOCK):
            raise ValueError(f"numel {numel} must be a multiple of world * pieces * {quant.QBLOCK}")
        self.world, self.pieces, self.numel = world, pieces, numel
        self.piece = numel // pieces
        self.chunk = self.piece // world  # elements of one rank's chunk within a piece
        self.send = [quant.Packed(self.chunk, world, device) for _ in range(pieces)]
        self.recv = [quant.Packed(self.chunk, world, device) for _ in range(pieces)]
        self.reduced = [quant.Packed(self.chunk, 1, device) for _ in range(pieces)]
        self.gathered = [quant.Packed(self.chunk, world, device) for _ in range(pieces)]

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        pieces = range(self.pieces)
        exchanges = []
        for p in pieces:  # quantize piece p while the exchange of piece p - 1 is on the wire
            quant.quantize(x[p * self.piece:(p + 1) * self.piece], packed=self.send[p])
            exchanges.append(dist.all_to_all_single(self.recv[p].buffer, self.send[p].buffer, async_op=True))
        gathers = []
        for p in pieces:
            exchanges[p].wait()  # the compute stream waits for NCCL's; the host does not block
            quant.reduce_requantize(packed=self.recv[p], out=self.reduced[p])
            gathers.append(_all_gather(self.gathered[p].buffer, self.reduced[p].buffer, async_op=True))
        for p in pieces:
            gathers[p].wait()
            quant.dequantize(packed=self.gathered[p], out=out[p * self.piece:(p + 1) * self.piece])
        return out


class P2PQuantizedAllReduce:
    """The same algorithm with the wire moved off NCCL: each rank quantizes into a symmetric-memory buffer
    (torch.distributed._symmetric_memory; plain P2P mappings, no multicast) and the others pull their chunks
    from it with copies (the GPU's copy engines, not its SMs), on a side stream, piece by piece, so the
    kernels of one piece run while the next piece is copied. Device-side barriers order the pieces.
    """

    def __init__(self, numel: int, world: int, device: torch.device, pieces: int = 4) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        if numel % (world * pieces * quant.QBLOCK):
            raise ValueError(f"numel {numel} must be a multiple of world * pieces * {quant.QBLOCK}")
        self.world, self.pieces, self.rank = world, pieces, dist.get_rank()
        self.piece = numel // pieces
        self.chunk = self.piece // world
        self.seg = quant.Packed.segment_bytes(self.chunk)  # bytes of one chunk's codes and scales
        self.send_bytes = world * self.seg  # per piece
        total = pieces * (self.send_bytes + self.seg)  # every piece's send segments, then every piece's reduced one
        group = dist.group.WORLD
        if hasattr(symm_mem, "enable_symm_mem_for_group") and not symm_mem.is_symm_mem_enabled_for_group(group.group_name):
            symm_mem.enable_symm_mem_for_group(group.group_name)  # needed by older releases; a no-op where not
        self.sym = symm_mem.empty(total, dtype=torch.int8, device=device)
        self.handle = symm_mem.rendezvous(self.sym, group.group_name)
        self.remote = [self.handle.get_buffer(r, (total,), torch.int8) for r in range(world)]
        self.recv = [quant.Packed(self.chunk, world, device) for _ in range(pieces)]
        self.gathered = [quant.Packed(self.chunk, world, device) for _ in range(pieces)]
        self.side = torch.cuda.Stream(device=device)
        # Every view a call uses, made once here (no per-call host work beyond the launches): this rank's send and
        # reduced segments in symmetric memory, and per piece the (destination, remote source) pairs to copy.
        rank, seg = self.rank, self.seg
        self.send = [quant.Packed(self.chunk, world, buffer=self._send(self.sym, p)) for p in range(pieces)]
        self.reduced = [quant.Packed(self.chunk, 1, buffer=self._reduced(self.sym, p)) for p in range(pieces)]
        self.mine = [send.segment(rank) for send in self.send]  # this rank's own chunk, read in place
        others = [r for r in range(world) if r != rank]
        self.pull_chunks = [[(self.recv[p].buffer[r * seg:(r + 1) * seg], self._send(self.remote[r], p)[rank * seg:(rank + 1) * seg])
                             for r in others] for p in range(pieces)]
        self.pull_reduced = [[(self.gathered[p].buffer[r * seg:(r + 1) * seg], self._reduced(self.remote[r], p))
                              for r in others] for p in range(pieces)]

    def _send(self, buf: torch.Tensor, p: int) -> torch.Tensor:
        return buf[p * self.send_bytes:(p + 1) * self.send_bytes]

    def _reduced(self, buf: torch.Tensor, p: int) -> torch.Tensor:
        start = self.pieces * self.send_bytes + p * self.seg
        return buf[start:start + self.seg]

    def _pull(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.cuda.Event:
        """Copy each remote source into its destination on the side stream, after the main stream's work so far."""
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            for dst, src in pairs:
                dst.copy_(src)
            done = torch.cuda.Event()
            done.record(self.side)
        return done

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        main = torch.cuda.current_stream()
        rank = self.rank
        self.handle.barrier(channel=0)  # every rank has finished reading this rank's buffers from the last call
        received = []
        for p in range(self.pieces):
            quant.quantize(x[p * self.piece:(p + 1) * self.piece], packed=self.send[p])
            self.handle.barrier(channel=1)  # piece p is quantized on every rank
            received.append(self._pull(self.pull_chunks[p]))  # chunk `rank` of piece p from every other rank
        gathered = []
        for p in range(self.pieces):
            main.wait_event(received[p])
            quant.reduce_requantize(packed=self.recv[p], out=self.reduced[p], own=(rank, self.mine[p]))
            self.handle.barrier(channel=2)  # piece p is reduced on every rank
            gathered.append(self._pull(self.pull_reduced[p]))  # every other rank's reduced chunk of piece p
        for p in range(self.pieces):
            main.wait_event(gathered[p])
            quant.dequantize(packed=self.gathered[p], out=out[p * self.piece:(p + 1) * self.piece],
                             own=(rank, self.reduced[p]))
        return out


def error_check(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """The quantized result y against an fp32 all-reduce of x, with the bound of the module's docstring."""
    exact = x.float().clone()
    dist.all_reduce(exact)
    amax_ranks = x.float().reshape(-1, quant.QBLOCK).abs().amax(dim=1)
    dist.all_reduce(amax_ranks)  # sum over ranks of each block's max |x_r|
    big_a = exact.reshape(-1, quant.QBLOCK).abs().amax(dim=1)
    e1 = amax_ranks / 254.0
    e2 = (big_a + e1) / 254.0
    per_block = (e1 + e2) * (1.0 + 2.0**-8) + 1e-5 * (amax_ranks + big_a)
    bound = per_block[:, None] + 2.0**-8 * exact.reshape(-1, quant.QBLOCK).abs()
    err = (y.float() - exact).abs().reshape(-1, quant.QBLOCK)
    excess = float((err / bound).max())
    rel_l2 = float(torch.linalg.vector_norm(y.float() - exact) / torch.linalg.vector_norm(exact))
    finite = bool(torch.isfinite(y).all())
    return {"max_error_over_bound": excess, "rel_l2": rel_l2, "max_abs_error": float(err.max()), "finite": finite}


def _inputs(numel: int, rank: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(1234 + rank)
    # Gradient-like: mostly small, a few larger values per block, a different scale per rank.
    return (torch.randn(numel, generator=g, device=device) * (1.0 + rank)).to(torch.bfloat16)


def allreduce_case(numel: int, variant: str, pieces: int = 4, check: bool = True, timing: bool = True,
                   budget_s: float = 2.0, target_noise: float = 0.01) -> dict[str, Any]:
    """variant 'quantized': quantized vs NCCL bf16; 'pipelined': pipelined quantized vs quantized (one piece);
    'p2p': the copy-engine form (P2PQuantizedAllReduce, in `pieces`) vs NCCL bf16."""
    from speedgate.distributed import measure_across_ranks

    rank, world, device = setup()
    try:
        x = _inputs(numel, rank, device)
        one = QuantizedAllReduce(numel, world, device, pieces=1)
        many = (P2PQuantizedAllReduce if variant == "p2p" else QuantizedAllReduce)(numel, world, device, pieces=pieces)
        out = torch.empty_like(x)
        result: dict[str, Any] = {"world": world, "numel": numel}
        if check:
            result["quantized"] = error_check(x, one(x, out))
            result["pipelined" if variant != "p2p" else "p2p"] = error_check(x, many(x, out))
        if timing:
            if variant == "pipelined":
                reference: Callable[[], Any] = lambda: one(x, out)  # noqa: E731
            else:  # against NCCL's bf16 all-reduce
                scratch = x.clone()  # all-reduced in place every call: its values grow, NCCL's speed does not care
                reference = lambda: dist.all_reduce(scratch)  # noqa: E731
            chosen = one if variant == "quantized" else many
            optimized: Callable[[], Any] = lambda: chosen(x, out)  # noqa: E731
            result["samples"] = measure_across_ranks(reference, optimized, budget_s=budget_s, target_noise=target_noise)
        return result
    finally:
        teardown()


# -- compute/communication overlap: a data-parallel backward with bucketed gradient all-reduce -------------------
class Buckets:
    """Gradients as views into flat buckets (like DDP's gradient_as_bucket_view), filled in backward's order."""

    def __init__(self, params: list[torch.nn.Parameter], bucket_bytes: int) -> None:
        self.buckets: list[tuple[torch.Tensor, list[torch.nn.Parameter]]] = []
        group: list[torch.nn.Parameter] = []
        size = 0
        for p in reversed(params):  # backward produces the last layer's gradients first
            group.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_bytes:
                self._add(group)
                group, size = [], 0
        if group:
            self._add(group)
        self.pending: list[Any] = []
        self._ready = [0] * len(self.buckets)
        self.overlap = False

    def _add(self, group: list[torch.nn.Parameter]) -> None:
        flat = torch.zeros(sum(p.numel() for p in group), dtype=group[0].dtype, device=group[0].device)
        offset = 0
        index = len(self.buckets)
        for p in group:
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
            p.register_post_accumulate_grad_hook(lambda _p, i=index: self._on_grad(i))
        self.buckets.append((flat, group))

    def _on_grad(self, index: int) -> None:
        self._ready[index] += 1
        if self.overlap and self._ready[index] == len(self.buckets[index][1]):
            self.pending.append(dist.all_reduce(self.buckets[index][0], async_op=True))

    def zero(self) -> None:
        for flat, _ in self.buckets:
            flat.zero_()
        self._ready = [0] * len(self.buckets)

    def finish(self) -> None:
        if not self.overlap:
            for flat, _ in self.buckets:
                dist.all_reduce(flat)
        for work in self.pending:
            work.wait()
        self.pending = []


def overlap_case(width: int, layers: int, tokens: int, bucket_mb: int = 25, check: bool = True, timing: bool = True,
                 budget_s: float = 2.0, target_noise: float = 0.01) -> dict[str, Any]:
    """One data-parallel backward: all-reduce of each bucket as soon as backward fills it, against all buckets
    all-reduced after backward (the same buckets, the same bytes)."""
    from speedgate.distributed import measure_across_ranks

    rank, world, device = setup()
    try:
        torch.manual_seed(0)  # the same weights on every rank
        layers_list: list[torch.nn.Module] = []
        for _ in range(layers):
            layers_list += [torch.nn.Linear(width, width, bias=False), torch.nn.GELU()]
        model = torch.nn.Sequential(*layers_list).to(device=device, dtype=torch.bfloat16)
        params = list(model.parameters())
        buckets = Buckets(params, bucket_mb * 2**20)
        g = torch.Generator(device=device).manual_seed(99 + rank)  # each rank its own data
        x = torch.randn(tokens, width, generator=g, device=device, dtype=torch.bfloat16)

        def step(overlap: bool) -> None:
            buckets.overlap = overlap
            buckets.zero()
            model(x).float().square().mean().backward()
            buckets.finish()

        result: dict[str, Any] = {"world": world, "buckets": len(buckets.buckets),
                                  "gradient_bytes": sum(p.numel() * p.element_size() for p in params)}
        if check:
            step(False)
            after = [p.grad.detach().clone() for p in params]
            step(True)
            same = all(torch.equal(a, p.grad) for a, p in zip(after, params))
            # and the gradients are the all-reduced ones: a second rank's data changed them
            local = [p.grad.detach().clone() for p in params]
            result["overlapped_equals_after"] = same
            result["reduced"] = world > 1 and not all(torch.equal(a, b) for a, b in zip(local, _local_grads(model, x, params)))
        if timing:
            result["samples"] = measure_across_ranks(lambda: step(False), lambda: step(True), budget_s=budget_s,
                                                     target_noise=target_noise)
        return result
    finally:
        teardown()


def _local_grads(model: torch.nn.Module, x: torch.Tensor, params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    grads = torch.autograd.grad(model(x).float().square().mean(), params)
    return [g.detach() for g in grads]
