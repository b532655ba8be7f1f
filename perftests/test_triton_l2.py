"""The L2-bypass experiment: eviction hints on a streaming kernel that shares L2 with a reused table.

Reference: the same Triton kernel without hints, and torch's broadcast add. The hinted kernel should keep the
table in L2 and move only stream + out + table bytes; if the hints change nothing, this case shows ~1.0x and
the README says so.
"""

from __future__ import annotations

import pytest
import torch

from perftests.kernels.streaming import stream_add, stream_add_eager
from perftests.support.compiled import compare_with_compiled
from perftests.support.inputs import compare_on_inputs, generator

pytestmark = pytest.mark.triton


@pytest.mark.parametrize("table_mib", [16, 32])
def test_l2_eviction_hints(perf, device: str, table_mib: int) -> None:
    if device == "cuda":
        # A 1 GiB stream and a table of 16 or 32 MiB (the H100's L2 is 50 MiB), rows of 4096 fp32 (16 KiB).
        # Between two uses of a table row, 2 * table_rows * 16 KiB of stream and out pass through L2: 32 MiB
        # for the small table (it can stay without help), 64 MiB for the large one (it cannot, unless hinted).
        rows, cols = 65536, 4096
        table_rows = table_mib * 2**20 // (cols * 4)
    else:
        rows, table_rows, cols = 24, 4 if table_mib == 16 else 8, 300

    def make(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        # About 1 GiB per set on the GPU (the stream). The gate holds five at once (three rotated, a copy of the
        # checked one, a fresh one for the re-check) and the test one more: about 6 GiB, fine on an 80 GB card.
        g = generator(device, seed)
        return torch.randn(rows, cols, generator=g, device=device), torch.randn(table_rows, cols, generator=g, device=device)

    stream, table = make(0)
    out = torch.full_like(stream, float("nan"))
    stream_add(stream, table, hints=True, out=out)
    perf.assert_close(out, stream_add_eager(stream, table))
    nbytes = (2 * stream.numel() + table.numel()) * 4
    del out
    hinted = lambda stream, table: stream_add(stream, table, hints=True)  # noqa: E731
    unhinted = lambda stream, table: stream_add(stream, table, hints=False)  # noqa: E731
    # Bound to input set 0 (zero-argument sides): the case is about L2 residency of the table, and rotating three
    # 1 GiB streams changes the experiment (docs/results/kernel-comments.md, "Test files").
    bind = ("the case measures whether eviction hints keep the table resident in L2 while a stream passes through, and "
            "rotating three input sets of 1 GiB streams changed what it measures (see the comment at this call)")
    compare_on_inputs(perf, unhinted, hinted, make, bind=bind, name="vs_no_hints", bytes=nbytes)
    compare_on_inputs(perf, stream_add_eager, hinted, make, bind=bind, name="vs_eager", bytes=nbytes)
    compare_with_compiled(perf, device, stream_add_eager, hinted, make, bind=bind, bytes=nbytes)
