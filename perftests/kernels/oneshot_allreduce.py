"""The quantized all-reduce of two GPUs as one persistent Triton kernel: one shot, flags inside the kernel.

Each rank quantizes its bf16 tensor block by block (perftests.kernels.quant's int8 codes and one fp32 scale per
QBLOCK elements: half the bytes) and stores the codes and scales straight into the other rank's symmetric-memory
buffer (torch.distributed._symmetric_memory: plain P2P mappings over NVLink, no multicast), then dequantizes both
ranks' blocks, sums them in fp32 and writes bf16. One launch, no host round trip: the exchange is ordered by flags.

  - The grid is at most one program per SM, so every program is resident, and its programs do one of two jobs.
    The first SENDERS programs only send: sender s quantizes chunks s, s + SENDERS, ... (a chunk: ROWS blocks) in
    WAVES waves, and after each wave raises its flag for that wave in the peer's memory (a release at system scope,
    after a barrier of its threads). The others only reduce: reducer r takes the chunks of senders r,
    r + reducers, ..., wave by wave, each once the peer's flag for it is up (an acquire). No sender ever waits, so
    the link is fed all along while the reducers sum what has come (lab/oneshot_forms.py measured this against
    programs that did both jobs in turn: docs/results/allreduce.md).
  - A call's number (its epoch) lives in device memory: read by every program when it starts, moved on by the last
    program to finish (a done counter that resets itself). Flags hold the epoch of the call that raised them, so
    nothing is cleared between calls, and a CUDA graph's replays, whose arguments are fixed, count on.
  - Two buffer slots, chosen by the epoch's parity: the peer can be one call ahead (it finished this call once it
    had this rank's every wave) and writes the other slot meanwhile; it cannot be two ahead.
  - A reducer recomputes its rank's own codes from the input (the same arithmetic that made what the peer got) and
    sums the two dequantized blocks in rank order, the same expression on both ranks: the results are
    bit-identical on both ranks.
  - A wait that spins past MAX_SPINS gives up and marks the rank's error word (a peer that never came: a bug), so a
    fault ends as a wrong result the check names, not a hang.

Error bound (no requantization, unlike the two-shot form): each rank's input is off by at most half its block's
scale, a_r / 254; fp32 adds relative errors near 2^-24; the bf16 store rounds once (2^-9 of the value). So
|y - y_fp32| <= (a_0 + a_1) / 254 (1 + 2^-8) + 2^-8 |y_fp32| + 1e-5 (a_0 + a_1) (perftests/support/nccl_cases.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from perftests.kernels.quant import QBLOCK, TINY_C

MAX_SPINS = 1 << 26  # an acquire load is about a microsecond away on the other GPU: a minute of waiting
ERROR_SPUN_OUT = -1


@triton.jit
def _mul(a, b):
    """a * b rounded once (mul.rn: never fused into an FMA, whichever code around it the compiler sees)."""
    return tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _add(a, b):
    """a + b rounded once (add.rn: never fused into an FMA)."""
    return tl.inline_asm_elementwise("add.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _codes(x_ptr, rows, row_ok, QBLOCK: tl.constexpr):
    """Rows of x quantized: (int8 codes as fp32, the rows' scales), perftests.kernels.quant's arithmetic, each
    operation rounded on its own: the send step and the reduce step compute the same codes to the bit, and both
    ranks the same sums (a fused multiply-add in one copy and not the other made them differ)."""
    cols = tl.arange(0, QBLOCK)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    inv = 127.0 / tl.maximum(amax, TINY_C)
    y = _mul(x, tl.broadcast_to(inv[:, None], x.shape))
    half = tl.full(x.shape, 0.5, tl.float32)
    code = tl.where(y >= 0, tl.floor(_add(y, half)), -tl.floor(_add(-y, half)))
    return code, amax / 127.0


@triton.jit
def _send(x_ptr, peer_codes_ptr, peer_scales_ptr, slot_codes, slot_scales, chunk, n_blocks, QBLOCK: tl.constexpr,
          ROWS: tl.constexpr):
    """One chunk's codes and scales, stored into the peer's slot."""
    cols = tl.arange(0, QBLOCK)
    rows = chunk * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    code, scale = _codes(x_ptr, rows, row_ok, QBLOCK)
    tl.store(peer_codes_ptr + slot_codes + rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :], code.to(tl.int8),
             mask=row_ok[:, None])
    tl.store(peer_scales_ptr + slot_scales + rows, scale, mask=row_ok)


@triton.jit
def _reduce(x_ptr, out_ptr, codes_ptr, scales_ptr, slot_codes, slot_scales, chunk, n_blocks, RANK: tl.constexpr,
            QBLOCK: tl.constexpr, ROWS: tl.constexpr):
    """One chunk's sum: this rank's codes (recomputed) and the peer's (from this rank's slot), in rank order."""
    cols = tl.arange(0, QBLOCK)
    rows = chunk * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_blocks
    code, scale = _codes(x_ptr, rows, row_ok, QBLOCK)
    at = rows.to(tl.int64)[:, None] * QBLOCK + cols[None, :]
    peer = tl.load(codes_ptr + slot_codes + at, mask=row_ok[:, None], other=0).to(tl.float32)
    peer_scale = tl.load(scales_ptr + slot_scales + rows, mask=row_ok, other=0.0)
    # In rank order, each operation rounded on its own: both ranks sum the same bits.
    mine = _mul(code, tl.broadcast_to(scale[:, None], code.shape))
    theirs = _mul(peer, tl.broadcast_to(peer_scale[:, None], peer.shape))
    if RANK == 0:
        total = _add(mine, theirs)
    else:
        total = _add(theirs, mine)
    tl.store(out_ptr + at, total.to(tl.bfloat16), mask=row_ok[:, None])


@triton.jit
def _oneshot_kernel(x_ptr, out_ptr, peer_codes_ptr, peer_scales_ptr, peer_flags_ptr, codes_ptr, scales_ptr, flags_ptr,
                    state_ptr, n_blocks, SLOT_CODES, SLOT_SCALES, SENDERS, RANK: tl.constexpr, QBLOCK: tl.constexpr,
                    ROWS: tl.constexpr, WAVES: tl.constexpr, MAX_SPINS: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    # state: [epoch, done, error]
    epoch = tl.load(state_ptr) + 1
    slot = (epoch % 2).to(tl.int64)
    slot_codes = slot * SLOT_CODES
    slot_scales = slot * SLOT_SCALES
    n_chunks = tl.cdiv(n_blocks, ROWS)
    if pid < SENDERS:
        iters = tl.cdiv(n_chunks - pid, SENDERS)
        per_wave = tl.cdiv(iters, WAVES)
        for w in tl.static_range(WAVES):
            for i in range(w * per_wave, tl.minimum((w + 1) * per_wave, iters)):
                _send(x_ptr, peer_codes_ptr, peer_scales_ptr, slot_codes, slot_scales, pid + i * SENDERS, n_blocks,
                      QBLOCK, ROWS)
            tl.debug_barrier()  # every thread's stores of this wave, before the flag that releases them
            tl.atomic_xchg(peer_flags_ptr + pid * WAVES + w, epoch, sem="release", scope="sys")
    else:
        spins = 0
        for s in range(pid - SENDERS, SENDERS, programs - SENDERS):
            iters = tl.cdiv(n_chunks - s, SENDERS)
            per_wave = tl.cdiv(iters, WAVES)
            for w in range(WAVES):
                flag = flags_ptr + s * WAVES + w
                seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
                while (seen < epoch) & (spins < MAX_SPINS):
                    seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
                    spins += 1
                if seen < epoch:
                    tl.atomic_xchg(state_ptr + 2, -1, sem="relaxed", scope="gpu")
                for i in range(w * per_wave, tl.minimum((w + 1) * per_wave, iters)):
                    _reduce(x_ptr, out_ptr, codes_ptr, scales_ptr, slot_codes, slot_scales, s + i * SENDERS, n_blocks,
                            RANK, QBLOCK, ROWS)
    # The last program to finish moves the epoch on for the next call (and resets the done counter).
    done = tl.atomic_add(state_ptr + 1, 1, sem="acq_rel", scope="gpu")
    if done == programs - 1:
        tl.store(state_ptr + 1, 0)
        tl.store(state_ptr, epoch)


def programs_for(n_blocks: int, rows: int, sms: int) -> int:
    """The grid: at most one program per SM, at least one sender and one reducer, no more senders than chunks."""
    return max(2, min(sms, 2 * triton.cdiv(n_blocks, rows)))


def _aligned(nbytes: int, to: int = 128) -> int:
    return (nbytes + to - 1) // to * to


class OneShotQuantizedAllReduce:
    """Buffers, handles and peer views for one tensor size on two ranks, set up once; __call__(x, out) writes the
    all-reduced sum of x into out with one kernel launch. rows, warps, waves: the kernel's tile (ROWS blocks a
    chunk), warps and waves; senders: how many of its programs send (the rest reduce; default half; see the
    module)."""

    def __init__(self, numel: int, world: int, device: torch.device, *, rows: int = 32, warps: int = 16,
                 waves: int = 16, senders: int | None = None) -> None:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        if world != 2:
            raise ValueError(f"the one-shot kernel exchanges between exactly 2 ranks, not {world}")
        if numel % QBLOCK:
            raise ValueError(f"numel {numel} must be a multiple of {QBLOCK}")
        self.numel, self.rows, self.warps, self.waves = numel, rows, warps, waves
        self.rank = dist.get_rank()
        self.n_blocks = numel // QBLOCK
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.programs = programs_for(self.n_blocks, rows, sms)
        self.senders = self.programs // 2 if senders is None else senders
        if not 1 <= self.senders < self.programs:
            raise ValueError(f"senders must be 1 to {self.programs - 1} of the {self.programs} programs, not {self.senders}")
        codes_bytes = _aligned(2 * numel)  # two slots of int8 codes
        scales_bytes = _aligned(2 * self.n_blocks * 4)
        flags_bytes = _aligned(self.senders * waves * 4)
        total = codes_bytes + scales_bytes + flags_bytes
        group = dist.group.WORLD
        if hasattr(symm_mem, "enable_symm_mem_for_group") and not symm_mem.is_symm_mem_enabled_for_group(group.group_name):
            symm_mem.enable_symm_mem_for_group(group.group_name)
        self.sym = symm_mem.empty(total, dtype=torch.int8, device=device)
        self.sym.zero_()  # flags start below every epoch
        self.handle = symm_mem.rendezvous(self.sym, group.group_name)
        peer = self.handle.get_buffer(1 - self.rank, (total,), torch.int8)

        def views(buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return (buf[:codes_bytes], buf[codes_bytes:codes_bytes + scales_bytes].view(torch.float32),
                    buf[codes_bytes + scales_bytes:].view(torch.int32))

        self.mine, self.peer = views(self.sym), views(peer)
        self.state = torch.zeros(3, dtype=torch.int32, device=device)  # epoch, done counter, error word
        torch.cuda.synchronize(device)
        self.handle.barrier(channel=0)  # both ranks' flags are zero before either sends

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.numel or out.numel() != self.numel:
            raise ValueError(f"this all-reduce was set up for {self.numel} elements, got {x.numel()} and {out.numel()}")
        (codes, scales, flags), (peer_codes, peer_scales, peer_flags) = self.mine, self.peer
        _oneshot_kernel[(self.programs,)](
            x, out, peer_codes, peer_scales, peer_flags, codes, scales, flags, self.state, self.n_blocks,
            self.numel, self.n_blocks, self.senders, RANK=self.rank, QBLOCK=QBLOCK, ROWS=self.rows, WAVES=self.waves,
            MAX_SPINS=MAX_SPINS, num_warps=self.warps)
        return out

    def failed(self) -> bool:
        """Whether a wait of any call so far spun out (the peer never raised its flag): read on the host, after the
        calls (it synchronizes)."""
        return int(self.state[2].item()) == ERROR_SPUN_OUT


__all__ = ["MAX_SPINS", "OneShotQuantizedAllReduce", "programs_for"]
