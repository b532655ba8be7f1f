"""The roofline floor from measured ceilings (pure arithmetic; measuring needs a GPU)."""

from __future__ import annotations

import pytest

from speedgate.ceilings import Ceilings


def test_memory_bound_floor() -> None:
    c = Ceilings(copy_gbps=3000.0)
    floor, bound = c.floor_ms(None, 3e9, None)
    assert floor == pytest.approx(1.0) and bound == "memory"


def test_compute_bound_floor_needs_a_measured_dtype() -> None:
    c = Ceilings(copy_gbps=3000.0, matmul_tflops={"bf16": 700.0})
    floor, bound = c.floor_ms(1.4e12, 3e6, "bf16")
    assert floor == pytest.approx(2.0) and bound == "compute"
    assert c.floor_ms(1.4e12, None, "fp8") is None  # no fp8 ceiling measured: nothing to compare against
    assert c.floor_ms(None, None, None) is None


# Each starting state of a process's fp32 matmul precision (the older interface, the newer one, both), the state
# speedgate.precision.fp32_matmul_precision must give during its block, and the readings it must give back: run in a fresh interpreter,
# since some of these states cannot be undone in this one.
PRECISION_PROBE = """
import json, sys, torch
from speedgate.precision import fp32_matmul_precision
m = torch.backends.cuda.matmul
exec(sys.argv[1])
def readings():
    out = []
    for read in (lambda: m.fp32_precision, torch.get_float32_matmul_precision, lambda: m.allow_tf32,
                 lambda: torch.backends.fp32_precision):
        try:
            out.append(str(read()))
        except RuntimeError:
            out.append("raises")
    return out
before = readings()
during = {}
for precision in ("highest", "high", "medium"):
    with fp32_matmul_precision(torch, precision):
        during[precision] = m.fp32_precision
    assert readings() == before, (precision, before, readings())
print(json.dumps({"before": before, "during": during}))
"""


@pytest.mark.parametrize("start", [
    "pass",  # torch's defaults: the newer flag 'none', the older 'highest'
    "torch.set_float32_matmul_precision('high')",
    "torch.set_float32_matmul_precision('medium')",
    "m.allow_tf32 = True",
    "m.fp32_precision = 'ieee'",
    "m.fp32_precision = 'tf32'",  # the newer interface alone: the older getter raises
    "torch.backends.fp32_precision = 'tf32'",
])
def test_switching_fp32_matmul_precision_leaves_it_as_it_was_found(start: str) -> None:
    """A matmul ceiling, measured in the user's process, and the suite's ladder switched the older flag and set it
    back; the newer flag stayed at 'ieee' where it had been 'none', and inductor keys its FX graph cache on it."""
    import json
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("this torch has only the older interface")
    done = subprocess.run([sys.executable, "-c", PRECISION_PROBE, start], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["during"] == {"highest": "ieee", "high": "tf32", "medium": "tf32"}


def test_an_unknown_precision_is_refused_by_name() -> None:
    torch = pytest.importorskip("torch")
    from speedgate.precision import fp32_matmul_precision

    with pytest.raises(ValueError, match="'tf32': one of highest, high, medium"):
        with fp32_matmul_precision(torch, "tf32"):
            pass
