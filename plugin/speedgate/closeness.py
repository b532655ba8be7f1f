"""assert_close: compare tensors, numbers and nested containers with dtype-aware tolerances."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# (rtol, atol) per dtype. The float entries are torch.testing.assert_close's defaults (about one to a few
# units in the last place of each format); fp8 gets one unit in the last place of its mantissa. They are
# deliberately not loosened: a kernel that needs more says so at its call site, where a reviewer sees it.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float8_e4m3fn": (0.125, 1e-3),
    "float8_e4m3fnuz": (0.125, 1e-3),
    "float8_e5m2": (0.25, 1e-3),
    "float8_e5m2fnuz": (0.25, 1e-3),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
PYTHON_FLOAT_TOLERANCE = DEFAULT_TOLERANCES["float64"]


@dataclass(frozen=True)
class Closeness:
    """How far actual was from expected: the largest absolute error and the relative L2 error."""

    max_abs_error: float
    rel_error: float
    elements: int


def _is_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and type(obj).__name__ in ("Tensor", "Parameter")


class NonFiniteExpected(AssertionError):
    """The expected value (the reference's output) holds NaN or Inf: what is wrong is the reference, whatever the
    actual value is."""


def _fail(path: str, message: str, kind: type[AssertionError] = AssertionError) -> AssertionError:
    where = f" at {path}" if path else ""
    return kind(f"speedgate.assert_close{where}: {message}")


def tolerances_for(dtype_name: str) -> tuple[float, float]:
    if dtype_name not in DEFAULT_TOLERANCES:
        raise ValueError(f"no default tolerance for dtype {dtype_name}; pass rtol= and atol=")
    return DEFAULT_TOLERANCES[dtype_name]


def _resolve(rtol: float | None, atol: float | None, default: tuple[float, float]) -> tuple[float, float]:
    if (rtol is None) != (atol is None):
        raise ValueError("pass both rtol and atol, or neither (the dtype's defaults)")
    if rtol is None or atol is None:
        return default
    if rtol < 0 or atol < 0 or not (math.isfinite(rtol) and math.isfinite(atol)):
        raise ValueError(f"tolerances must be finite and non-negative, got rtol={rtol}, atol={atol}")
    return float(rtol), float(atol)


def _nonfinite_message(tensor: Any, torch: Any, side: str) -> str | None:
    finite = torch.isfinite(tensor)
    if bool(finite.all()):
        return None
    nan = int(torch.isnan(tensor).sum())
    inf = int((~finite).sum()) - nan
    first = tuple(int(i) for i in (~finite).nonzero()[0].tolist())
    return f"{side} holds {nan} NaN and {inf} Inf of {tensor.numel()} elements (first at index {first})"


def _compare_tensors(
    actual: Any, expected: Any, rtol: float | None, atol: float | None, path: str, rel_l2: float | None = None
) -> Closeness:
    import torch

    if not _is_tensor(expected):
        raise _fail(path, f"actual is a tensor, expected is {type(expected).__name__}")
    if actual.shape != expected.shape:
        raise _fail(path, f"shape mismatch: actual {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise _fail(
            path,
            f"dtype mismatch: actual {actual.dtype}, expected {expected.dtype} "
            "(compare like with like; cast explicitly if the case exists to show a precision change)",
        )
    dtype_name = str(actual.dtype).removeprefix("torch.")
    a = actual.detach()
    e = expected.detach().to(a.device)
    if not (a.is_floating_point() or a.is_complex()):
        mismatched = a != e
        bad = int(mismatched.sum())
        if bad:
            first = tuple(int(i) for i in mismatched.nonzero()[0].tolist())
            raise _fail(path, f"{bad} of {a.numel()} {dtype_name} elements differ (exact match required); first at {first}")
        return Closeness(0.0, 0.0, a.numel())
    for tensor, side in ((e, "expected"), (a, "actual")):  # a broken reference first: it says nothing of actual
        message = _nonfinite_message(tensor, torch, side)
        if message:
            raise _fail(path, message, NonFiniteExpected if side == "expected" else AssertionError)
    if rel_l2 is None:
        rtol_, atol_ = _resolve(rtol, atol, tolerances_for(dtype_name))
    wide = torch.complex128 if a.is_complex() else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    diff = (a64 - e64).abs()
    norm_e = float(torch.linalg.vector_norm(e64))
    rel = float(torch.linalg.vector_norm(a64 - e64)) / norm_e if norm_e > 0 else float(torch.linalg.vector_norm(a64 - e64))
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if rel_l2 is not None:
        if not rel > rel_l2:
            return Closeness(max_abs, rel, a.numel())
        raise _fail(
            path,
            f"relative L2 error {rel:.4g} exceeds the bound {rel_l2:g} "
            f"(||actual - expected|| / ||expected|| over {a.numel()} {dtype_name} elements); max abs error {max_abs:.3g}",
        )
    over = diff > atol_ + rtol_ * e64.abs()
    bad = int(over.sum())
    if bad:
        worst = int(torch.argmax(diff - (atol_ + rtol_ * e64.abs())))
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), a.shape))
        raise _fail(
            path,
            f"{bad} of {a.numel()} {dtype_name} elements exceed |actual - expected| <= {atol_:g} + {rtol_:g} * |expected|; "
            f"worst at {idx}: actual {a64.flatten()[worst].item():.6g}, expected {e64.flatten()[worst].item():.6g}; "
            f"max abs error {max_abs:.3g}, relative L2 error {rel:.3g}",
        )
    return Closeness(max_abs, rel, a.numel())


def _compare_numbers(actual: Any, expected: Any, rtol: float | None, atol: float | None, path: str) -> Closeness:
    if isinstance(actual, bool) or isinstance(expected, bool) or (isinstance(actual, int) and isinstance(expected, int)):
        if actual != expected or type(actual) is not type(expected):
            raise _fail(path, f"{actual!r} != {expected!r} (exact match required)")
        return Closeness(0.0, 0.0, 1)
    a, e = complex(actual), complex(expected)
    for value, side in ((e, "expected"), (a, "actual")):
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise _fail(path, f"{side} is {value.real if value.imag == 0 else value!r}, not finite",
                        NonFiniteExpected if side == "expected" else AssertionError)
    rtol_, atol_ = _resolve(rtol, atol, PYTHON_FLOAT_TOLERANCE)
    err = abs(a - e)
    if err > atol_ + rtol_ * abs(e):
        raise _fail(path, f"{actual!r} vs expected {expected!r}: |difference| {err:.3g} > {atol_:g} + {rtol_:g} * |expected|")
    return Closeness(err, err / abs(e) if e else err, 1)


def assert_close(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    _path: str = "",
    *,
    rel_l2: float | None = None,
) -> Closeness:
    """Fail with an AssertionError naming the first difference; return the worst error seen.

    Tensors must match in shape and dtype; floating tensors must be finite on both sides and satisfy
    |actual - expected| <= atol + rtol * |expected| elementwise, with the dtype's default tolerances when
    none are given; integer and bool tensors must match exactly. Lists, tuples and dicts are compared
    element by element; Python floats use float64 tolerances, Python ints and bools exact equality.

    rel_l2= replaces the elementwise test of floating tensors with a normwise one, ||actual - expected|| <=
    rel_l2 * ||expected|| (for low-precision formats such as fp8, whose elementwise error has no useful bound
    near zero); it cannot be combined with rtol/atol. Shapes, dtypes and finiteness are checked as always.
    """
    if rel_l2 is not None:
        if rtol is not None or atol is not None:
            raise ValueError("pass rel_l2= or rtol=/atol=, not both")
        if not (math.isfinite(rel_l2) and rel_l2 > 0):
            raise ValueError(f"rel_l2 must be finite and positive, got {rel_l2}")
        if not _is_tensor(actual):
            raise _fail(_path, f"rel_l2= compares tensors; actual is {type(actual).__name__}")
    if _is_tensor(actual):
        return _compare_tensors(actual, expected, rtol, atol, _path, rel_l2)
    if _is_tensor(expected):
        raise _fail(_path, f"expected is a tensor, actual is {type(actual).__name__}")
    if isinstance(actual, (int, float, complex)) and isinstance(expected, (int, float, complex)):
        return _compare_numbers(actual, expected, rtol, atol, _path)
    if isinstance(actual, dict) and isinstance(expected, dict):
        if set(actual) != set(expected):
            raise _fail(_path, f"keys differ: actual {sorted(map(str, actual))}, expected {sorted(map(str, expected))}")
        results = [assert_close(actual[k], expected[k], rtol, atol, f"{_path}[{k!r}]") for k in expected]
        return _worst(results)
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            raise _fail(_path, f"lengths differ: actual {len(actual)}, expected {len(expected)}")
        results = [assert_close(a, e, rtol, atol, f"{_path}[{i}]") for i, (a, e) in enumerate(zip(actual, expected))]
        return _worst(results)
    if actual is None and expected is None:
        return Closeness(0.0, 0.0, 0)
    raise _fail(_path, f"cannot compare {type(actual).__name__} with {type(expected).__name__}")


def _worst(results: list[Closeness]) -> Closeness:
    if not results:
        return Closeness(0.0, 0.0, 0)
    return Closeness(
        max(r.max_abs_error for r in results),
        max(r.rel_error for r in results),
        sum(r.elements for r in results),
    )
