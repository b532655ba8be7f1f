"""The lab's forms of the Gluon kernels (the attention schedules and fp8 matmul forms the suite does not time)
compile for sm_90 on any machine, with no ptxas note and no spill, their MMAs kept in flight as each form means to
(perftests/support/gluon_build.py compiles them in a subprocess without TRITON_INTERPRET)."""

from __future__ import annotations

import pytest

from perftests.support import gluon_build

pytest.importorskip("triton")

ATTENTION_BUILD = """
import json
from lab.codegen_probe import attention_gluon
from perftests.support.gluon_build import dot_ops, ptxas_report
SWITCHES = {"pv_under": {}, "lookahead": {"LOOKAHEAD": True}, "two_warpgroups": {"WARP_SPECIALIZED": True},
            "pingpong": {"WARP_SPECIALIZED": True, "PINGPONG": True}}
builds = [(128, False, "lookahead", (64, 64, 4, 2)), (64, True, "pingpong", (128, 64, 8, 2)),
          (128, True, "pv_under", (64, 64, 4, 2)), (128, False, "two_warpgroups", (128, 128, 8, 2))]
found = {}
for head_dim, causal, schedule, (bm, bn, warps, stages) in builds:
    built = attention_gluon(head_dim, causal, bm, bn, warps, stages, SWITCHES[schedule], "ptx")
    found[f"{schedule} {head_dim} {'causal' if causal else 'full'}"] = dict(ops=dot_ops(built["ttgir"]),
                                                                        **ptxas_report(built["ptx"]))
print(json.dumps(found))
"""


def test_the_attention_schedules_build_unserialized() -> None:
    """Each schedule the suite does not time, at a tile it takes (and pv_under at a tile the suite does not use).
    In pv_under's loop (the two-warpgroup schedules run it in each warpgroup) p v stays in flight while the scores
    are waited for (a wait for 1 pending MMA, then for 0); lookahead waits for both at once."""
    found = gluon_build.build(ATTENTION_BUILD)
    assert len(found) == 4
    pv_under = ["dot async", "dot async", "wait pendings=1", "wait pendings=0"]
    expected = {"pv_under": [pv_under], "lookahead": [["dot async", "dot async", "wait pendings=0"]],
                "two_warpgroups": [pv_under, pv_under], "pingpong": [pv_under, pv_under]}
    for name, built in found.items():
        assert built["notes"] == [], f"{name}: ptxas {built['notes']}"
        assert built["spill_stores"] == 0, f"{name}: {built['spill_stores']} bytes spilled"
        assert gluon_build.loops(built["ops"]) == expected[name.split()[0]], f"{name}: {built['ops']}"


def test_the_fp8_matmul_forms_build_unserialized() -> None:
    """Every form of the Gluon fp8 matmul: two consumer warpgroups each running its own loop: two MMA halves, each
    waited for before its promotion add, or (quarters) four quarter MMAs with two in flight, each partial added
    while the next runs; with or without the loader partition, one output tile a program or (persistent, with the
    loader) a loop over output tiles."""
    found = gluon_build.build("""
import json
from lab.codegen_probe import fp8_matmul_gluon
from perftests.support.gluon_build import dot_ops, ptxas_report
from perftests.kernels.matmul_gluon import STAGES
found = {}
for quarters in (False, True):
    for loader, persistent in ((False, False), (True, False), (True, True)):
        built = fp8_matmul_gluon(STAGES, "ptx", quarters, loader, persistent)
        found[f"{quarters} {loader} {persistent}"] = dict(ops=dot_ops(built["ttgir"]), **ptxas_report(built["ptx"]))
print(json.dumps(found))
""")
    half = ["dot async", "wait pendings=0"]
    two_in_flight = ["dot async", "dot async"] + ["wait pendings=1", "dot async"] * 2 + ["wait pendings=1", "wait pendings=0"]
    assert len(found) == 6
    for name, built in found.items():
        loop = two_in_flight if name.startswith("True") else half * 2
        assert built["notes"] == [] and built["spill_stores"] == 0, (name, built)
        assert gluon_build.loops(built["ops"]) == [loop, loop], (name, built["ops"])
