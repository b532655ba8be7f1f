"""speedgate: gate optimized PyTorch/Triton code on correctness and on its measured speedup over a reference."""

from __future__ import annotations

__version__ = "0.2.0"

__all__ = ["__version__"]
