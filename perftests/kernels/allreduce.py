"""The all-reduce algorithms under test (multi-GPU; they run inside ranks, see perftests/support/nccl_cases.py).

All-reduce of a bf16 tensor, three ways:
  nccl_bf16        dist.all_reduce of the bf16 tensor (NCCL's ring or tree: each rank sends and receives about
                   2 (W - 1) / W of the tensor's bytes)
  quantized        block-wise int8 (perftests.kernels.quant): quantize; all_to_all so that rank j receives every
                   rank's codes and scales for chunk j; dequantize, sum in fp32 and requantize chunk j (one
                   kernel); all_gather the reduced chunks; dequantize. Each rank moves 2 (W - 1) / W of the int8
                   bytes plus the scales: 0.502 of the bf16 bytes.
  pipelined        the same in P pieces: the kernels of one piece run on the compute stream while the collectives
                   of the piece before are on the wire (NCCL runs them on its own stream).
The quantized forms' error bound, and its check, are in perftests/support/nccl_cases.py.

And the bucketed gradient all-reduce of a data-parallel backward (Buckets), overlapped with backward or not.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from perftests.kernels import quant


def all_gather(out: torch.Tensor, inp: torch.Tensor, async_op: bool = False) -> Any:
    """Every rank's inp, concatenated in rank order, into out (one collective)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # 2.13 renamed it
    return gather(out, inp, async_op=async_op)


class QuantizedAllReduce:
    """Buffers for one tensor size, allocated once; __call__(x, out) writes the all-reduced sum of x into out.

    Per piece, one all_to_all and one all_gather, each of a packed int8 buffer whose segments hold a chunk's codes
    and then its scales (perftests.kernels.quant.Packed): separate collectives for the scales would cost far more
    time than the few bytes they carry (docs/results/allreduce.md).
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
            gathers.append(all_gather(self.gathered[p].buffer, self.reduced[p].buffer, async_op=True))
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
