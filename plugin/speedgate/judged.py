"""The end's first stage: each hardware key's baseline file as the run judged against it (the summary's header, read
before blessing rewrites the files) and, in a gate, the keys whose file lacks entries for what the run measured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import report
from .advice import bless_command
from .baseline import BaselineError

if TYPE_CHECKING:
    from .ending import Finish, RunEnd


def judged_against(run: RunEnd, done: Finish) -> None:
    """The summary's header (each hardware key's file as this run judged against it) and, in a gate, the keys whose
    file lacks entries for what the run measured."""
    if not run.used:
        return
    keys, book = run.result_keys, run.book
    errors: dict[str, str] = {}
    for key in keys:
        try:
            book.doc_for(key)
        except BaselineError as exc:
            errors[key] = str(exc)
    if not run.settings.update_baselines:
        done.alerts = ungated(run)
    done.header = report.header(
        keys, docs=book.docs, errors=errors, paths={k: book.path_for(k) for k in keys},
        updating=run.settings.update_baselines, gpu_state=run.gpu_state_at_start, ceilings=run.ceilings_seen,
        fingerprints=run.fingerprints, workers=run.workers,
        timed=any(r.timed for r in run.records) or bool(run.metric_records), lost_workers=run.lost_workers,
    )


def ungated(run: RunEnd) -> list[str]:
    """One line per hardware key whose baseline file exists but lacks entries for comparisons or metrics this run
    measured: those read "new" and nothing gates them on this hardware. And one line per key for comparisons whose
    entries were timed otherwise (another unit, or from an idle device where the case now replays CUDA graphs or
    holds its ranks: judging.timed_otherwise), which read "new" too, though the file has them."""
    from .verdict import Verdict

    lines = []
    for key in run.result_keys:
        if run.book.docs.get(key) is None:
            continue
        timed = [r for r in run.records if r.hardware_key == key and r.timed]
        metrics = [m for m in run.metric_records if m.hardware_key == key]
        missing = []
        for what, measured in (("comparisons", timed), ("metrics", metrics)):
            new = [r for r in measured if r.verdict == Verdict.NEW and getattr(r, "blessed", None) is None]
            if new:
                missing.append(f"{len(new)} of the {len(measured)} {what}")
        if missing:
            lines.append(f"{' and '.join(missing)} measured on {key} have no entry in {run.book.path_for(key)}: "
                         f"nothing gates them on this hardware (bless them there with {bless_command()}, on "
                         "this kind of GPU)")
        apart = [r for r in timed if r.verdict == Verdict.NEW and r.blessed is not None]
        if apart:
            lines.append(f"{len(apart)} of the {len(timed)} comparisons measured on {key} have entries in "
                         f"{run.book.path_for(key)} timed otherwise (another unit, or from an idle device where the case "
                         "now replays CUDA graphs or holds its ranks): nothing gates them until they are blessed again on this kind of GPU "
                         f"({bless_command()})")
    return lines


__all__ = ["judged_against", "ungated"]
