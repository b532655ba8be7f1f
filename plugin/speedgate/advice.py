"""What to do next, in words: the one place that tells a user how to confirm a result, bless it or re-bless it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .verdict import Verdict

SHORT_FLAG, OWN_FLAG = "--update-baselines", "--speedgate-update-baselines"
_flag = [SHORT_FLAG]  # the spelling this run's advice says (spell_bless_flag)


def spell_bless_flag(taken: Iterable[str]) -> None:
    """Say speedgate's own --speedgate-update-baselines in every piece of advice where the project or another plugin
    defines --update-baselines (`taken`: the short spellings left to others, options.add_short_spellings), so that
    no hint names a command that does not bless; the short spelling otherwise."""
    _flag[0] = OWN_FLAG if SHORT_FLAG in taken else SHORT_FLAG


def bless_flag() -> str:
    """The bless option as this run spells it: --update-baselines, or --speedgate-update-baselines (spell_bless_flag)."""
    return _flag[0]


def bless_command(target: str = "", *, quoted: bool = False) -> str:
    """The bless command for target (a node id, or nothing for the whole selection), in backquotes."""
    command = f"pytest {bless_flag()}"
    if not target:
        return f"`{command}`"
    return f"`{command} '{target}'`" if quoted else f"`{command} {target}`"


def rebless_hint() -> str:
    """The short hint a note carries when a case or metric improved beyond its tolerance."""
    return f"re-bless with {bless_flag()}"


def unusable_file_hint() -> str:
    """What to do about a baseline file that cannot be read (not JSON, not speedgate's schema, a bad number)."""
    return (f"the file was left untouched: restore it (from version control), or move it aside and bless again with "
            f"{bless_command()}")


def create_file_hint(timed: bool = True) -> str:
    """What to do when this hardware has no baseline file yet; timed: whether the run timed anything (under the Triton
    interpreter, or with --correctness-only, nothing is, and a bless here would write nothing)."""
    if not timed:
        return (f"nothing this run measured was timed, so a bless here writes none: create it with {bless_command()} "
                "where the cases are timed (on the GPU, without TRITON_INTERPRET or --correctness-only)")
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
