"""Tolerance bounds the test modules derive from the arithmetic: fp32 reductions in different orders, and one side
rounding an intermediate that the other keeps wider."""

from __future__ import annotations

import math

import torch

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


def intermediate_rounding_atol(expected: torch.Tensor, dtype: torch.dtype, factor: float = 2.0) -> float:
    """Absolute tolerance when one side rounds an intermediate to `dtype` (flash attention's P) and the other
    does not: `factor` units of that dtype's roundoff at the output's largest magnitude."""
    unit = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: FP32_EPS}[dtype]
    return factor * unit * float(expected.detach().abs().max().float())
