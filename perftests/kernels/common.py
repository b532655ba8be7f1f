"""Helpers the kernel modules share: the interpreter switch, tolerance bounds for long reductions."""

from __future__ import annotations

import math
import os

import torch

INTERPRETING = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")

FP32_EPS = 2.0**-24  # unit roundoff of float32


def reduction_atol(expected: torch.Tensor, terms: int, safety: float = 8.0) -> float:
    """Absolute tolerance for outputs that are fp32 sums of `terms` products, computed in different orders.

    Two fp32 accumulations of the same k products differ by about sqrt(k) * u * |partial sums|, and the
    partial sums are bounded by max|expected| (typical for the random inputs used here); `safety` covers
    the few-sigma tail over tens of millions of outputs. Elements near zero need this: a relative
    tolerance alone would demand that two summation orders agree to the last bit of a tiny value.
    """
    scale = float(expected.detach().abs().max().float())
    return safety * math.sqrt(terms) * FP32_EPS * scale
