"""What to do next, in words: the one place that tells a user how to confirm a result, bless it or re-bless it."""

from __future__ import annotations

from pathlib import Path

from .verdict import Verdict

BLESS = "pytest --update-baselines"


def bless_command(target: str = "", *, quoted: bool = False) -> str:
    """The bless command for target (a node id, or nothing for the whole selection), in backquotes."""
    if not target:
        return f"`{BLESS}`"
    return f"`{BLESS} '{target}'`" if quoted else f"`{BLESS} {target}`"


def rebless_hint() -> str:
    """The short hint a note carries when a case or metric improved beyond its tolerance."""
    return "re-bless with --update-baselines"


def create_file_hint() -> str:
    """What to do when this hardware has no baseline file yet."""
    return f"create it with {bless_command()} on this hardware"


def next_step(
    verdict: Verdict,
    *,
    nodeid: str,
    baseline_path: Path,
    hardware_key: str,
    artifacts_dir: Path | None = None,
    metric: bool = False,
) -> str:
    """The line under a failure: what to do about this verdict."""
    if verdict == Verdict.REGRESSED:
        if metric:
            return f"Next: re-run to confirm; if intended, re-bless with {bless_command(nodeid)}"
        look = (f"inspect the artifacts kept under {artifacts_dir}; " if artifacts_dir
                else "keep artifacts with --speedgate-artifacts DIR; ")
        return (f"Next: re-run this test to confirm; {look}if the slowdown is intended, re-bless with "
                f"{bless_command(nodeid)}")
    if verdict == Verdict.INCONCLUSIVE:
        return ("Next: re-run this test on a quiet machine (nothing else on its GPU or CPU); if it stays inconclusive, "
                "raise the budget (--speedgate-budget) so that its interval narrows")
    if metric:
        return f"strict mode: {verdict.value} metric; bless it with {bless_command(nodeid)}"
    if verdict == Verdict.PICK_CHANGED:
        return (f"strict mode: the case ran other kernels than blessed; hold the pick (an autotuner: the suite's "
                f"hold_blessed) or re-bless with {bless_command(nodeid)}")
    if verdict == Verdict.NO_BASELINE_FILE:
        return (f"strict mode: there is no baseline file {baseline_path} for hardware key {hardware_key}; "
                f"create it with {bless_command()}")
    if verdict == Verdict.NEW:
        return f"strict mode: {baseline_path} has no entry for this case; bless it with {bless_command(nodeid)}"
    return f"strict mode: bless the improvement with {bless_command(nodeid)}"
