"""What the Gluon kernels share on Hopper: the ring of shared-memory slots and its position, and the register budget
of the warp-specialized partitions (a producer's warp and two consumer warpgroups)."""

# No `from __future__ import annotations`: Triton's aggregates check each field against its annotation's class.

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

# Triton 3.6 and 3.7 name it only here (their Gluon tutorials import it so); later releases add gl.aggregate.
from triton.language.core import _aggregate as aggregate

# Registers a thread, per partition of a kernel of two consumer warpgroups and a one-warp loader. Hopper hands
# registers out per warpgroup (4 warps; setmaxnreg moves them between warpgroups), so the loader's one warp holds a
# warpgroup's share: 3 warpgroups, 384 threads. At launch each thread gets 65536 registers an SM / 384 = 170,
# rounded down to a multiple of 8: 168 (the PTX's .maxnreg), so a thread of each of the 3 warpgroups shares
# 3 x 168 = 504. The loader keeps setmaxnreg's minimum, 24 (it only issues TMA copies and waits); the worker consumer
# asks for CONSUMER_REGS; Triton gives the default partition (the other consumer) the rest, 504 - 232 - 24 = 248
# (the setmaxnreg values in the PTX). What a consumer holds: the fp8 matmul's, its 64 x 256 fp32 accumulator (128
# registers a thread) and an MMA's 64 x 128 partial (64 more); the attention's at D = 128, its 64 x 128 accumulator
# and scores (64 each) and p in 16 bits (32). ptxas must spill in neither (the sm_90 build tests check it).
CONSUMER_REGS = gl.constexpr(232)
LOADER_REGS = gl.constexpr(24)


# Use n of a ring of STAGES slots (the n-th tile through it, counted from 0) lies in slot n % STAGES, and the
# slot's barriers complete one phase per use, alternating 0 and 1: use n waits for phase (n // STAGES) & 1. The two
# formulas are these two functions (each a function of its own, so that a wait computes the barrier's address before
# its phase, as the kernels always did: the PTX stays the same).
@gluon.jit
def ring_slot(n, STAGES: gl.constexpr):
    return n % STAGES


@gluon.jit
def ring_phase(n, STAGES: gl.constexpr):
    return (n // STAGES) & 1


@aggregate
class Ring:
    """A ring of STAGES shared-memory slots and the mbarriers that pass each slot between its producer and its
    consumers: ready[slot] completes when the slot's tiles have landed (TMA's transaction count), empty[slot] when
    every consumer has released it (arrive count: the consumers)."""

    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    STAGES: gl.constexpr

    @gluon.constexpr_function  # so that a launch can hash it (Triton hashes everything a kernel reaches)
    def __init__(self, ready, empty, STAGES):
        self.ready = ready
        self.empty = empty
        self.STAGES = gl.constexpr(STAGES)

    @gluon.jit
    def wait_ready(self, n):
        """A consumer's wait for use n's tiles; returns its slot."""
        slot = ring_slot(n, self.STAGES)
        self.wait_ready_in(slot, n)
        return slot

    @gluon.jit
    def wait_ready_in(self, slot, n):
        """wait_ready with use n's slot already computed (ring_slot)."""
        mbarrier.wait(self.ready.index(slot), ring_phase(n, self.STAGES))

    @gluon.jit
    def wait_empty(self, n):
        """The producer's wait before it fills use n: the slot's previous use (n - STAGES) released by every
        consumer, one phase before use n's (the first STAGES uses find their slots empty: no wait)."""
        slot = ring_slot(n, self.STAGES)
        mbarrier.wait(self.empty.index(slot), ring_phase(n, self.STAGES) ^ 1, pred=n >= self.STAGES)
        return slot

    @gluon.jit
    def release(self, slot):
        """A consumer's release of a slot it has read."""
        mbarrier.arrive(self.empty.index(slot), count=1)
