"""tools/ttgir_dots.py: the flash kernel's warpgroup MMAs and their waits, read from Triton's own TTGIR for sm_90
on a machine without a GPU (run as a user runs it: its own process, the interpreter off)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def dots(*args: str, interpret: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(ROOT / "tools" / "ttgir_dots.py"), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_the_key_loop_waits_for_its_scores_before_the_softmax() -> None:
    done = dots("--head-dim", "128", "--block", "128x128", "--warps", "8", "--switch", "FOLD=1")
    assert done.returncode == 0, done.stderr[-2000:]
    ops = done.stdout.split("\n")
    # One loop over key blocks holding its two MMAs (scores q k^T, then p v), as the kernel is written.
    assert ops.count("for {") == 1 and ops.count("}") == 1, ops
    body = ops[ops.index("for {") + 1:ops.index("}")]
    assert [op for op in body if op.startswith("dot")] == ["dot async", "dot async"], body
    # What docs/NOTES.md (fifth session) builds on, with Triton 3.6.0 and 3.7.1: the scores' MMA is waited for at
    # once (pendings=0), so the softmax after it never overlaps an MMA of the same warpgroup. If a Triton release
    # changes this, FlashAttention-3's intra-warpgroup overlap may have become expressible: measure it.
    assert body[:2] == ["dot async", "wait pendings=0"], body


def test_the_causal_kernel_has_two_loops_and_bad_input_is_named() -> None:
    done = dots("--head-dim", "64", "--causal", "--block", "64x64", "--warps", "4")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n").count("for {") == 2  # below the diagonal, then the diagonal block
    done = dots("--switch", "PINGPONG=1")
    assert done.returncode != 0 and "no constexpr ['PINGPONG']" in done.stderr
    done = dots(interpret=True)
    assert done.returncode != 0 and "unset TRITON_INTERPRET" in done.stderr
