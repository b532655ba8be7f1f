"""tools/vendor_gap_probe.py's plumbing, through the Triton interpreter on tiny shapes (its timings are the GPU's
business): every variant and every swept config becomes a side, each side's error is checked before it is timed,
a side that computes something else is reported and left out, and a side that cannot be graphed is timed as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import tools.vendor_gap_probe as probe
from perftests.kernels import attention as attn

probe.DEVICE = "cpu"
probe.ATTENTION_SHAPES = [(64, 32, True)]
probe.ATTENTION_TOKENS, probe.ATTENTION_WIDTH = 64, 64
timed = []

class Timer:
    def time_each(self, fns):
        for fn in fns:
            fn()
        timed.append(len(fns))
        return [1.0] * len(fns)

    def graphed(self, fn):
        raise RuntimeError("no CUDA graphs on the CPU")

flash = attn.flash_attention
def wrong_when_heavy_first(q, k, v, causal, **kw):
    out = flash(q, k, v, causal, **kw)
    return out * 1.5 if kw.get("heavy_first") else out  # a variant that computes something else
attn.flash_attention = wrong_when_heavy_first
rows = probe.probe_attention(torch, Timer(), 1, True, True)
print("ROWS " + json.dumps(rows))
'''


def test_the_probe_times_only_sides_that_compute_the_reference_function(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    rows = {r["side"]: r for r in json.loads(out.split("ROWS ", 1)[1])}
    # The vendor's two backends, every variant, and the swept configs of the default and the best-known variant.
    assert {"sdpa", "sdpa_flash", "default", "fold", "fold+heavy_first", "fold+warp_specialize"} <= set(rows)
    assert "default @ 32x16 w4 s1" in rows and "fold+heavy_first @ 32x16 w4 s1" in rows
    for side in ("sdpa", "sdpa_flash", "default", "fold", "default @ 32x16 w4 s1"):
        assert rows[side]["ms"] == 1.0 and rows[side]["vs_sdpa"] == 1.0 and rows[side]["spread"] == 0.0, rows[side]
        assert rows[side]["vs_sdpa_range"] == [1.0, 1.0]
    assert rows["default @ 32x16 w4 s1"]["config"] == {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    # The wrong variant, as the autotuner runs it and at its swept config: reported with its error, never timed.
    for side in ("fold+heavy_first", "fold+heavy_first @ 32x16 w4 s1"):
        assert rows[side]["ms"] is None and "differs from SDPA" in rows[side]["failed"], rows[side]
    # No graphs here: each timed side said so and was timed as it is.
    assert out.count("not captured, timed ungraphed") == sum(1 for r in rows.values() if r["ms"] is not None)
