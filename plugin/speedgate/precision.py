"""fp32 matmul precision switched for a block and then given back exactly as it was (torch passed in: the plugin
imports no torch at import time)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# torch.set_float32_matmul_precision's names, in the newer interface's words
NEWER = {"highest": "ieee", "high": "tf32", "medium": "tf32"}


@contextlib.contextmanager
def fp32_matmul_precision(torch: Any, precision: str) -> Iterator[None]:
    """fp32 matmuls at precision ('highest': full precision; 'high' or 'medium': TF32 allowed, as
    torch.set_float32_matmul_precision takes them) for the duration, and afterwards the process's setting exactly as
    it was, in both of torch's interfaces (torch.set_float32_matmul_precision, the older one, and, from torch 2.9,
    torch.backends.cuda.matmul.fp32_precision).

    Setting the older one and setting it back leaves the newer one at 'ieee' or 'tf32' where it had been 'none', and
    inductor keys its FX graph cache on it: a graph this process saved was missed by a fresh process compiling the
    same graph (perftests/test_compile_modes.py). A process that had set only the newer interface made the older
    one's getter raise; there the newer interface alone is switched."""
    if precision not in NEWER:
        raise ValueError(f"fp32 matmul precision {precision!r}: one of {', '.join(NEWER)}")
    matmul = torch.backends.cuda.matmul
    newer = getattr(matmul, "fp32_precision", None)
    try:
        older: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # the two interfaces disagree: the process sets the newer one, and so does this
        older = None
    if older is None:
        matmul.fp32_precision = NEWER[precision]
    else:
        torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        if older is not None:
            torch.set_float32_matmul_precision(older)
        if newer is not None:
            matmul.fp32_precision = newer
