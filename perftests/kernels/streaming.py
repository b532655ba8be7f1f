"""The L2-bypass experiment: a streaming add against a small table that every row reuses.

out[r, :] = stream[r, :] + table[r % T, :]. The stream (read once) and out (written once) are far larger than
L2; the table is smaller than L2 and is read again every T rows. Without hints, the stream's lines push the
table's out of L2 and it is re-read from DRAM; with them, stream loads and out stores are marked evict-first
and table loads evict-last, so the table should stay. Floor: stream + out + table bytes, once each.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _stream_add_kernel(out_ptr, stream_ptr, table_ptr, n_cols, table_rows, HINTS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    t_row = row % table_rows
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        if HINTS:
            s = tl.load(stream_ptr + row * n_cols + cols, mask=mask, eviction_policy="evict_first")
            t = tl.load(table_ptr + t_row * n_cols + cols, mask=mask, eviction_policy="evict_last")
            tl.store(out_ptr + row * n_cols + cols, s + t, mask=mask, eviction_policy="evict_first")
        else:
            s = tl.load(stream_ptr + row * n_cols + cols, mask=mask)
            t = tl.load(table_ptr + t_row * n_cols + cols, mask=mask)
            tl.store(out_ptr + row * n_cols + cols, s + t, mask=mask)


def stream_add(stream: torch.Tensor, table: torch.Tensor, hints: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row r of the result is stream[r] + table[r % len(table)]; fp32 only (the experiment is about bytes)."""
    if stream.dim() != 2 or table.dim() != 2 or stream.shape[1] != table.shape[1]:
        raise ValueError(f"stream (R, C) and table (T, C) expected; got {tuple(stream.shape)}, {tuple(table.shape)}")
    if stream.dtype != torch.float32 or table.dtype != torch.float32 or not (stream.is_contiguous() and table.is_contiguous()):
        raise ValueError("stream and table must be contiguous float32")
    out = torch.empty_like(stream) if out is None else out
    block = min(triton.next_power_of_2(stream.shape[1]), 4096)
    _stream_add_kernel[(stream.shape[0],)](out, stream, table, stream.shape[1], table.shape[0], HINTS=hints, BLOCK=block, num_warps=8)
    return out


def stream_add_eager(stream: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The same sum by broadcasting (needs len(stream) to be a multiple of len(table))."""
    rows, cols = stream.shape
    return (stream.view(rows // table.shape[0], table.shape[0], cols) + table).view(rows, cols)
