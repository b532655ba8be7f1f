"""The row-wise Triton RMSNorm as PyTorch operators, so torch.compile can carry a hand-written kernel.

- `speedgate_perf::rms_norm`: an opaque custom op (torch.library.custom_op + register_fake). Compiles with
  fullgraph=True everywhere, the Triton interpreter included; inductor treats it as a black box.
- `speedgate_perf::rms_norm_triton`: a triton_op, whose kernel launch inductor can see (GPU only: the
  interpreter's kernels cannot be traced).
"""

from __future__ import annotations

import torch
import triton

from .common import INTERPRETING
from .rowwise import _rms_norm_kernel, _row_launch, rms_norm


@torch.library.custom_op("speedgate_perf::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    shape = x.shape
    return rms_norm(x.reshape(-1, shape[-1]).contiguous(), weight, eps).reshape(shape)


@rms_norm_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x)


HAS_TRITON_OP = hasattr(torch.library, "triton_op") and not INTERPRETING

if HAS_TRITON_OP:
    from torch.library import triton_op, wrap_triton

    @triton_op("speedgate_perf::rms_norm_triton", mutates_args=())
    def rms_norm_triton_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        out = torch.empty_like(rows)
        block, warps = _row_launch(rows.shape[1])
        wrap_triton(_rms_norm_kernel)[(rows.shape[0],)](
            out, rows, weight, rows.stride(0), out.stride(0), rows.shape[1], eps, BLOCK=block, num_warps=warps
        )
        return out.reshape(x.shape)

del triton
