"""lab/codegen_probe.py: the suite's Hopper kernels compiled for sm_90 by Triton's own stages and ptxas on a
machine without a GPU (run as a user runs it: its own process, the interpreter off). The last assertions of each
test pin what docs/NOTES.md (2026-11-23) builds on; a Triton release that changes them has changed the reasons
given for the vendor gap (issue 16): measure again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str, interpret: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(ROOT / "lab" / "codegen_probe.py"), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_the_attention_loop_waits_for_its_scores_before_the_softmax() -> None:
    done = probe("attention", "--head-dim", "128", "--block", "128x128", "--warps", "8", "--switch", "FOLD=1")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # One loop over key blocks holding its two MMAs (scores q k^T, then p v), as the kernel is written.
    assert lines.count("for {") == 1 and lines.count("}") == 1, lines
    body = lines[lines.index("for {") + 1:lines.index("}")]
    assert [op for op in body if op.startswith("dot")] == ["dot async", "dot async"], body
    assert any(line.startswith("ptxas: ") and " registers" in line for line in lines), lines
    assert any(line.startswith("shared memory: ") and "blocks per SM: " in line for line in lines), lines
    # Triton 3.6.0 and 3.7.1: the scores' MMA is waited for at once (pendings=0), so the softmax after it never
    # overlaps an MMA of the same warpgroup.
    assert body[:2] == ["dot async", "wait pendings=0"], body


def test_precise_fp8_makes_ptxas_wait_for_every_k_tile_and_fast_accumulation_does_not() -> None:
    precise = probe("fp8-matmul", "--block", "256x128x128")
    fast = probe("fp8-matmul", "--block", "256x128x128", "--switch", "FP8_PRECISE=0")
    specialized = probe("fp8-matmul", "--block", "256x128x128", "--switch", "WARP_SPECIALIZE=1")
    for done in (precise, fast, specialized):
        assert done.returncode == 0, done.stderr[-2000:]
    # The promotion's adds read the MMAs' accumulator: ptxas waits for them every K tile (C7517), and at this
    # tile serializes the MMAs (C7514); the fast mode has no promotion and neither note.
    assert "ptxas C7517" in precise.stdout and "ptxas C7514" in precise.stdout, precise.stdout
    assert "C75" not in fast.stdout, fast.stdout
    # The tile loop's warp_specialize is left untransformed on sm_90: the same kernel as without it.
    assert "warp-specialized partitions: no" in specialized.stdout
    assert specialized.stdout == precise.stdout


def test_bad_input_is_named() -> None:
    done = probe("attention", "--switch", "PINGPONG=1")
    assert done.returncode != 0 and "no constexpr ['PINGPONG']" in done.stderr
    done = probe("attention", interpret=True)
    assert done.returncode != 0 and "unset TRITON_INTERPRET" in done.stderr


def test_occupancy_counts_blocks_by_registers_and_shared_memory() -> None:
    from lab import codegen_probe as tool

    # 106 registers round up to 112 a thread (256 a warp at a time): 4 warps hold 14 336, 4 blocks in 65 536; 56 KiB
    # and a little more of shared memory plus the 1 KiB reserved: 3 blocks in 228 KiB.
    assert tool.occupancy(106, 4, 56 * 1024 + 100) == {"blocks_by_registers": 4, "blocks_by_shared": 3, "blocks_per_sm": 3}
    # 187 registers at 8 warps (the D=128 128x128 tile): one block, whatever the shared memory.
    assert tool.occupancy(187, 8, 1024)["blocks_per_sm"] == 1
