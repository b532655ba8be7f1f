"""Judging one comparison or metric: its measurement against its baseline entry, the result, its note and its
failure text."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import codegen, distributed
from .advice import next_step, rebless_hint
from .attribution import MOVED, which_side_moved
from .closeness import Closeness
from .devices import busy_host
from .evidence import cause_of, judged_against
from .hardware import software_drift
from .measure import Measurement
from .results import CompareResult, MetricResult
from .stats import sample_stats
from .timers.cuda import IdleStart
from .timers.cycles import CYCLES_TIMER
from .tolerance import WIDE_TOLERANCE
from .verdict import Judgement, Verdict, fmt_ci, judge, judge_metric, straddles

# Measurements of one comparison before its verdict stands when the first did not pass clearly: the first and up to
# two more (see final_judgement).
MEASUREMENTS_TO_DECIDE = 3
# A case is reported as measured on an unstable GPU when thermal policy held its clocks down for more than this
# fraction of its comparison (NVML violation counters, read before and after).
THROTTLE_NOTE_FRACTION = 0.05
# How a verdict says a race was undone (undo_race), for a drop, a pass and a drop it does not explain alike.
AT_BLESSED_SHARE = "with those kernels at their blessed share of the side's kernel time"


def judge_measurement(
    measurement: Measurement,
    again: Callable[[], Measurement],
    fields: Mapping[str, Any],
    *,
    entry: Mapping[str, Any] | None,
    file_found: bool,
    remeasure: bool,
    graphed: bool,
    throttled: Mapping[str, float],
    roofline: Callable[[Measurement], dict[str, Any]],
    closeness: list[Closeness],
    software: Mapping[str, Any] | None = None,
) -> tuple[CompareResult, Measurement, Measurement]:
    """The judged result of a measurement; when remeasure and the first did not pass clearly, measured again
    (again()) up to MEASUREMENTS_TO_DECIDE times in all (final_judgement); returns (result, first measurement, the
    measurement judged)."""
    tolerance = fields["tolerance"]
    blessed = entry["speedup"] if entry else None
    baseline, centered = judged_against(entry, tolerance) if entry else (None, 0)
    blessed_timer = entry.get("timer") if entry else None
    timed_apart = timed_otherwise(entry, measurement.timer, graphed) if entry else ""
    if timed_apart:
        baseline = None  # e.g. a speedup in SM cycles and one in milliseconds are not the same number
    first = measurement
    judgement = judge(measurement.estimate, baseline, tolerance, file_found=file_found)
    taken = [(measurement, judgement)]
    if remeasure and undecided(judgement, measurement):
        # Not yet a clear pass: measure again, up to MEASUREMENTS_TO_DECIDE in all, before calling it. A transient
        # (another process, a clock dip) must not fail CI, and a noisy re-measurement must not clear a regression.
        while len(taken) < MEASUREMENTS_TO_DECIDE and not decided(taken):
            measurement = again()
            taken.append((measurement, judge(measurement.estimate, baseline, tolerance, file_found=file_found)))
        judgement = final_judgement(taken)
    note = judgement.note
    if timed_apart:
        note = f"{timed_apart}: re-bless this case"
    if centered and judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCONCLUSIVE):
        note += f" (the baseline is the median of {centered} cards' evidence (blessed {blessed:.3f}x on one))"
    if judgement.verdict == Verdict.IMPROVED:
        note += f" ({rebless_hint()})"
    if len(taken) > 1:
        said = ", ".join(f"{m.speedup:.3f}x {_state(j, m)}{_capped_words(m)}" for m, j in taken)
        note = f"{note} (measured {len(taken)} times: {said})".strip()
    moved: dict[str, Any] = {}
    verdict = judgement.verdict
    if entry and verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCONCLUSIVE):
        words, moved["reference_change"], moved["optimized_change"] = which_side_moved(
            measurement.reference_ms, measurement.optimized_ms, entry, software)
        note = f"{note}; {words}"
    if verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE):  # what else the times hold: a busy host, its pace
        for also in (busy_host(fields.get("host_load"), fields.get("host_cores")), outrun_words(measurement),
                     cut_words(measurement)):
            if also:
                note = f"{note}; {also}"
    measured_kernels = fields.get("codegen")
    blessed_kernels = entry.get("codegen") if entry else None
    kernel_changes = codegen.changes(blessed_kernels, measured_kernels)
    drift = codegen_drift(entry, software)
    if kernel_changes:
        after = f" after {', '.join(drift)}" if drift else ""
        note = f"{note}; codegen changed since the bless{after}: {'; '.join(kernel_changes)}".lstrip("; ")
        if unsaid := unrecorded_compilers(entry, software):
            note = (f"{note} (the entry does not say which {' or '.join(unsaid)} made its kernels: blessed before "
                    "speedgate recorded it; a re-bless records it)")
        if not drift and verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCONCLUSIVE) and \
                (pick := check_pick(judgement, measurement.speedup, moved, blessed_kernels, measured_kernels,
                                    optimized_ms=measurement.optimized_ms, busy_ms=fields.get("optimized_busy_ms"))):
            said = f"the {' and '.join(pick.repicked)} side ran other kernels than blessed"
            if pick.raced:
                others = [side for side in pick.repicked if side != "optimized"]
                said = (f"{'the reference side ran other kernels than blessed, and ' if others else ''}"
                        f"{race_words({'optimized': pick.raced})}")
            if pick.explains:
                # The same software picked other kernels (an autotuner's race, inductor's, a library's
                # heuristics), and that side's move is the speedup's: another kernel's speed, not a change of the
                # blessed one.
                verdict = Verdict.PICK_CHANGED
                at = AT_BLESSED_SHARE if pick.raced else "at its blessed time"
                note = (f"{said}: another pick, not the blessed kernels slower or faster ({at} the "
                        f"speedup reads {pick.undone:.3f}x, inside the band); hold the pick (an autotuner: "
                        f"hold_blessed) or re-bless ({judgement.verdict.value} as measured). {note}")
            else:
                why = pick_not_explaining(judgement, pick.undone, moved, pick.repicked, pick.new_work, pick.raced)
                note = f"{note}; {said}, {why}"
        elif not drift and (raced := pass_on_race(
                judgement, measurement.speedup, blessed_kernels, measured_kernels,
                sides_ms={"reference": measurement.reference_ms, "optimized": measurement.optimized_ms},
                busy_ms={side: fields.get(f"{side}_busy_ms") for side in ("reference", "optimized")})):
            verdict, words = raced
            note = f"{note}; {words}".lstrip("; ")
        elif not drift and (repicked := passed_on_another_pick(verdict, blessed_kernels, measured_kernels)):
            verdict = Verdict.PICK_CHANGED
            note = (f"the {' and '.join(repicked)} side ran other kernels than blessed, a pick this entry never saw: "
                    f"inside the band, but a pass on another pick says nothing of the blessed kernels' speed; "
                    f"record the pick (python -m speedgate evidence FILE REPORT) or hold it. {note}")
    if fields.get("judged_pick"):
        note = f"{note}; {fields['judged_pick']}".lstrip("; ")
    if blessed_timer and blessed_timer != measurement.timer and not timed_apart and judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
        note = f"{note}; timed with {measurement.timer}, blessed with {blessed_timer}: re-bless with this timer"
    config = fields.get("config")
    if entry and entry.get("config") is not None and config is not None and entry["config"] != config:
        note = f"{note}; configuration changed since the baseline: {config_change(entry['config'], config)}".lstrip("; ")
    # Power capping is the steady state of tensor-core work on these cards (recorded, not flagged); thermal
    # slowdown is not, and makes the measurement unstable.
    if throttled.get("thermal", 0.0) > THROTTLE_NOTE_FRACTION:
        note = (f"{note}; GPU thermally throttled for {min(throttled['thermal'], 1.0):.0%} of the comparison: "
                "an unstable measurement").lstrip("; ")
    if not measurement.settled:
        # No rounds dropped: this run settled, and a calibrating run after it did not (pipeline.calibration).
        when = (f"after {measurement.dropped_rounds} rounds were dropped" if measurement.dropped_rounds
                else "in a calibrating run after the judged one")
        note = f"{note}; the device's speed still drifted {when}: an unstable measurement".lstrip("; ")
    wide = entry is not None and fields.get("tolerance_source") == "calibrated" and tolerance > WIDE_TOLERANCE
    result = CompareResult(
        timed=True, verdict=verdict, note=note, **fields, **measured_fields(measurement, judgement),
        tolerance_cause=cause_of(entry) if wide and entry is not None else None,
        codegen_changes=kernel_changes or None, codegen_drift=bool(kernel_changes and drift),
        remeasured=first is not measurement, graphed=graphed, blessed=blessed,
        throttled={name: round(frac, 3) for name, frac in throttled.items()} or None,
        **roofline(measurement), **error_fields(closeness), **moved,
    )
    return result, first, measurement


@dataclass(frozen=True)
class PickCheck:
    """What other kernels than blessed do to a verdict: the sides that ran them (codegen.repicked_sides), the speedup
    with those sides at their blessed times (at_blessed_picks), the kernels the optimized side launched beside its
    blessed ones (codegen.added_kernels), whether the pick explains the verdict (pick_explains), and the optimized
    side's kernels that ran another of inductor's configs of themselves (codegen.raced_kernels; [] where the side
    launched other kernels, or none)."""

    repicked: list[str]
    undone: float | None
    new_work: list[str]
    explains: bool
    raced: list[str] = field(default_factory=list)


def check_pick(judgement: Judgement, speedup: float, moved: Mapping[str, Any],
               blessed_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None,
               measured_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None, *,
               optimized_ms: float | None = None, busy_ms: Any = None) -> PickCheck | None:
    """The pick-changed rule, in one place for the gate and for re-judging recorded runs (lab/rejudge.py): None when
    no side ran other kernels than blessed. An optimized side that raced (codegen.raced_kernels) is undone by its
    kernels' shares (undo_race), the rest of its time kept as measured."""
    repicked = codegen.repicked_sides(blessed_kernels, measured_kernels)
    if not repicked:
        return None
    raced = codegen.raced_on(blessed_kernels, measured_kernels)
    undone = at_blessed_picks(speedup, moved, [side for side in repicked if not (side == "optimized" and raced)])
    if raced and undone is not None:
        undone = undo_race(undone, codegen.unraced_factor(blessed_kernels, measured_kernels), optimized_ms, busy_ms)
    new_work = codegen.added_kernels(blessed_kernels, measured_kernels, "optimized")
    return PickCheck(repicked, undone, new_work, pick_explains(judgement, undone, moved, repicked, new_work, raced),
                     raced)


def undo_race(speedup: float, factor: float | None, side_ms: float | None, busy_ms: Any,
              side: str = "optimized") -> float | None:
    """The speedup with one side's raced kernels at their blessed share of its kernel time (codegen.unraced_factor):
    where the side's kernel time per call is known (`busy_ms`, the audit's), only that part of `side_ms` is scaled,
    the rest (the host's, between launches) kept; else the whole side. None without a factor (an entry blessed before
    kernels' shares were recorded)."""
    if factor is None:
        return None
    if isinstance(busy_ms, (int, float)) and side_ms and 0 < busy_ms <= side_ms:
        undone_ms = side_ms - float(busy_ms) * (1.0 - factor)
        if undone_ms <= 0:
            return None
        scale = side_ms / undone_ms
    else:
        scale = 1.0 / factor
    return speedup * scale if side == "optimized" else speedup / scale  # speedup = reference / optimized


def passed_on_another_pick(verdict: Verdict, blessed_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None,
                           measured_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> list[str]:
    """The sides of a pass that ran another pick (codegen.repicked_sides) than the kernels it was judged against (the
    entry's, or the other pick picks.judged_entry matched): [] unless the verdict is a pass. Such a pass measured
    kernels the entry never saw, not the blessed ones, and a slowdown of the code can hide behind a faster pick (a
    study's +5% under max-autotune's unheld pick passed so: docs/results/gate-study.md, section 10); it is named
    pick-changed. One rule for the gate and for re-judging recorded runs (lab/rejudge.py)."""
    return codegen.repicked_sides(blessed_kernels, measured_kernels) if verdict == Verdict.PASS else []


def pass_on_race(judgement: Judgement, speedup: float,
                 blessed_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None,
                 measured_kernels: Mapping[str, Sequence[Mapping[str, Any]]] | None, *,
                 sides_ms: Mapping[str, float | None] | None = None,
                 busy_ms: Mapping[str, Any] | None = None) -> tuple[Verdict, str] | None:
    """A pass whose every side that ran other kernels than blessed ran another of inductor's configs of its own
    kernels (codegen.raced_kernels: a compiled reference's, a compiled optimized side's), judged as the blessed kernels
    would have read (undo_race, side by side; `sides_ms` and `busy_ms` by side): still inside the band, a pass of the
    code, said; under the floor, a regression the other configs hid. None where that cannot be told (a side launched
    other kernels, the optimized side new work, no shares recorded, or a reading over the band):
    passed_on_another_pick decides. One rule for the gate and for re-judging recorded runs (lab/rejudge.py)."""
    if judgement.verdict != Verdict.PASS or judgement.baseline is None or judgement.floor is None:
        return None
    sides = codegen.repicked_sides(blessed_kernels, measured_kernels)
    raced = {side: codegen.raced_on(blessed_kernels, measured_kernels, side) for side in sides}
    if not sides or not all(raced.values()) or codegen.added_kernels(blessed_kernels, measured_kernels, "optimized"):
        return None
    undone = speedup
    for side in sides:
        factor = codegen.unraced_factor(blessed_kernels, measured_kernels, side)
        step = undo_race(undone, factor, (sides_ms or {}).get(side), (busy_ms or {}).get(side), side)
        if step is None:
            return None
        undone = step
    if undone > 2 * judgement.baseline - judgement.floor:
        return None
    said = f"{race_words(raced)}; {AT_BLESSED_SHARE} the speedup reads {undone:.3f}x"
    if undone >= judgement.floor:
        return Verdict.PASS, f"{said}, inside the band: a pass of the blessed kernels"
    return Verdict.REGRESSED, (f"{said}, under the floor {judgement.floor:.3f}x: the other configs hid a slowdown, "
                               "regressed")


def race_words(raced: Mapping[str, Sequence[str]]) -> str:
    """The sides that ran another of inductor's configs of their own kernels (codegen.raced_kernels, by side), in
    words."""
    which = " and ".join(f"the {side} side{' ran' if i == 0 else ''} another of inductor's configs of "
                         f"{', '.join(names)}" for i, (side, names) in enumerate(raced.items()))
    return f"{which} (the same kernel source and settings: the autotuner's pick in this process, not an edit)"


def config_change(blessed: Any, measured: Any, *, shown: int = 160) -> str:
    """A configuration's change in words: both in full while they are short; else how many of its settings (leaves,
    by path) differ, were added or went, and the first few (max-autotune's held picks are hundreds of timed choices)."""
    if len(repr(blessed)) + len(repr(measured)) <= shown:
        return f"{blessed} -> {measured}"
    before, after = _leaves(blessed), _leaves(measured)
    changed = sorted(path for path in before.keys() & after.keys() if before[path] != after[path])
    added, gone = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    parts = [f"{len(items)} {word}" for items, word in ((changed, "changed"), (added, "added"), (gone, "gone")) if items]
    first = [f"{'~+-'[i]}{path}" for i, items in enumerate((changed, added, gone)) for path in items[:2]]
    return f"{', '.join(parts) or 'no setting'} of {len(before)} settings ({'; '.join(first[:3])})"


def _leaves(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, Mapping) and config:
        out: dict[str, Any] = {}
        for key, value in config.items():
            out.update(_leaves(value, f"{prefix}/{key}" if prefix else str(key)))
        return out
    return {prefix: config}


def at_blessed_picks(speedup: float, moved: Mapping[str, Any], repicked: Sequence[str]) -> float | None:
    """The speedup had each side in `repicked` taken its blessed time (its other pick undone), the other side as
    measured: speedup = reference / optimized, so a reference at its blessed time divides by (1 + its change) and an
    optimized one multiplies by it. None when a side's change is unknown."""
    for side in repicked:
        change = moved.get(f"{side}_change")
        if not isinstance(change, (int, float)):
            return None
        speedup = speedup / (1.0 + change) if side == "reference" else speedup * (1.0 + change)
    return speedup


def pick_explains(judgement: Judgement, undone: float | None, moved: Mapping[str, Any], repicked: Sequence[str],
                  new_work: Sequence[str] = (), raced: Sequence[str] = ()) -> bool:
    """Whether another pick accounts for a speedup outside its band: the speedup with every repicked side at its
    blessed time (`undone`, at_blessed_picks) lies back inside the band, and, for a drop, the optimized side took its
    blessed time (within MOVED) doing its blessed work (`new_work`: the kernels it launched beside the blessed ones,
    codegen.added_kernels; none) with its blessed kernels (not in `repicked`).

    A drop where the optimized side ran other kernels itself is that side's own speed, which is what the case gates:
    undoing its pick would put it back at its blessed time whatever it took, so a slowed pick faster than the blessed
    kernels would pass (it did, in a study: docs/results/gate-study.md, section 7).

    A repicked side that moved less than the drop explains only its part: a reference that repicked without moving,
    beside an optimized side 2.9% slower under a 2% tolerance, stays a regression. An optimized side that moved past
    MOVED (slower, or with the host's state, as both sides of a launch-bound case do) stays a regression whatever the
    reference picked: a study's 5% slowdown read "pick-changed" and passed that way (docs/results/gate-study.md).
    Nor is a drop excused where the optimized side did new work: the time of a launch-bound side moves with the host's
    state between processes, so an extra kernel can cost 5% and the side still read within MOVED of its blessed time
    (docs/results/gate-study-h200.md).

    An optimized side that ran another of inductor's configs of its own kernels (`raced`: the same source and settings,
    codegen.raced_kernels) is that process's autotuner, not the code: its drop is explained where `undone` (its
    raced kernels at their blessed share of its kernel time, undo_race; the host's time and its other kernels' as
    measured) lies inside the band and it did no new work."""
    if undone is None or judgement.baseline is None or judgement.floor is None:
        return False
    ceiling = 2 * judgement.baseline - judgement.floor
    if judgement.verdict == Verdict.IMPROVED:
        return undone <= ceiling
    change = moved.get("optimized_change")
    own = bool(raced) or (isinstance(change, (int, float)) and abs(change) <= MOVED and "optimized" not in repicked)
    return own and not new_work and judgement.floor <= undone <= ceiling


def pick_not_explaining(judgement: Judgement, undone: float | None, moved: Mapping[str, Any],
                        repicked: Sequence[str], new_work: Sequence[str] = (), raced: Sequence[str] = ()) -> str:
    """Why another pick does not account for a verdict (pick_explains said no), in words."""
    change = moved.get("optimized_change")
    if raced and undone is None and not new_work:
        return ("but the other config cannot be weighed: the entry records no share of the side's kernel time for its "
                "kernels (blessed before speedgate recorded them; `python -m speedgate evidence FILE REPORT "
                "--facts-only` or a re-bless records them), or a side's blessed time is unknown: "
                f"{judgement.verdict.value}")
    if judgement.verdict != Verdict.IMPROVED and "optimized" in repicked and not raced:
        against = f"{change:+.1%} against the bless" if isinstance(change, (int, float)) else "no blessed time"
        return f"and that is the optimized side's own speed, which the case gates ({against}): {judgement.verdict.value}"
    if judgement.verdict != Verdict.IMPROVED and new_work:
        return (f"but the optimized side did new work beside its blessed kernels ({', '.join(new_work)}): the pick "
                f"does not explain the drop, {judgement.verdict.value}")
    if judgement.verdict != Verdict.IMPROVED and not raced and isinstance(change, (int, float)) and abs(change) > MOVED:
        return (f"but the optimized side's own time moved too ({change:+.1%}): the pick does not explain the drop, "
                f"{judgement.verdict.value}")
    if undone is None:
        return f"with no blessed time to undo the pick against: {judgement.verdict.value}"
    at = AT_BLESSED_SHARE if raced else "at its blessed time"
    return (f"but {at} the speedup would still read {undone:.3f}x, outside the band: the pick does not "
            f"explain it, {judgement.verdict.value}")


def codegen_drift(entry: Mapping[str, Any] | None, software: Mapping[str, Any] | None) -> list[str]:
    """'triton 3.6.0 -> 3.7.1' for each kernel-making package whose version changed since the entry was blessed."""
    if not entry:
        return []
    keep = lambda versions: {k: v for k, v in dict(versions or {}).items() if k in codegen.COMPILERS}  # noqa: E731
    return software_drift(keep(entry.get("software")), keep(software))


def unrecorded_compilers(entry: Mapping[str, Any] | None, software: Mapping[str, Any] | None) -> list[str]:
    """'ptxas 13.0.88' for each kernel-making package this run records that the entry does not (blessed before
    speedgate recorded it): whether it changed since the bless cannot be told."""
    if not entry:
        return []
    recorded = dict(entry.get("software") or {})
    return [f"{k} ({v} in this run)" for k, v in dict(software or {}).items()
            if k in codegen.COMPILERS and k not in recorded]


def clock_unit(timer: Any) -> str:
    """What a timer's samples count: 'SM cycles' (timers.cycles) or 'milliseconds' (every other timer)."""
    return "SM cycles" if timer == CYCLES_TIMER else "milliseconds"


def timed_otherwise(entry: Mapping[str, Any], timer: Any, graphed: bool) -> str:
    """Why a measurement's speedup is not the same number as the entry's, in words ("" when it is): counted in
    other units (SM cycles against milliseconds), or one side of the change timed from an idle device with its host
    work (cuda-events-idle-start) and the other as CUDA graph replays, the device's work alone. Only a case's own
    change moves a comparison between those two (a side that synchronizes cannot be captured, and only graph=True
    replays), so no change of a side's code drops its baseline this way; a side that starts to synchronize moves a
    held comparison to the idle start, and is judged as before."""
    blessed = entry.get("timer")
    if blessed is None:
        return ""
    if clock_unit(blessed) != clock_unit(timer):
        return f"blessed in {clock_unit(blessed)} ({blessed}), timed in {clock_unit(timer)} ({timer})"
    was_graphed = bool(entry.get("graphed"))
    if (blessed == IdleStart.name and graphed) or (was_graphed and timer == IdleStart.name):
        return f"blessed {_timed_how(was_graphed)} ({blessed}), timed {_timed_how(graphed)} ({timer})"
    if blessed == distributed.IDLE_TIMER and timer == distributed.HELD_TIMER:
        # A multi-rank case that asked to be held: its entry counted the hosts' launches and skew (a held side
        # that starts to synchronize falls back to the idle start, and is judged as before).
        return (f"blessed from an idle device at every call, the hosts' launches and skew included ({blessed}), "
                f"timed held, the devices' work alone ({timer})")
    return ""


def _timed_how(graphed: bool) -> str:
    return "as CUDA graph replays, the device's work alone" if graphed else "from an idle device, its host work included"


def undecided(judgement: Judgement, measurement: Measurement) -> bool:
    """Whether a measurement leaves the verdict open: its interval wholly under the floor (a regression to confirm),
    or its point estimate under the floor with the interval reaching over it."""
    return judgement.verdict == Verdict.REGRESSED or straddles(judgement, measurement.estimate)


def decided(taken: list[tuple[Measurement, Judgement]]) -> bool:
    """A clear pass (the last measurement no longer undecided), or a regression seen twice."""
    last_m, last_j = taken[-1]
    return not undecided(last_j, last_m) or sum(j.verdict == Verdict.REGRESSED for _, j in taken) >= 2


def final_judgement(taken: list[tuple[Measurement, Judgement]]) -> Judgement:
    """The verdict of up to MEASUREMENTS_TO_DECIDE measurements of one comparison: the last one's when it is a clear
    pass (or improvement); regressed when two of them lay wholly under the floor; else inconclusive."""
    last_m, last_j = taken[-1]
    if not undecided(last_j, last_m):
        return last_j
    regressed = [j for _, j in taken if j.verdict == Verdict.REGRESSED]
    if len(regressed) >= 2:
        return last_j if last_j.verdict == Verdict.REGRESSED else regressed[-1]
    floor = last_j.floor if last_j.floor is not None else 0.0
    note = (f"inconclusive: {len(taken)} measurements neither cleared the floor {floor:.3f}x nor lay wholly under it "
            f"twice (last {fmt_ci(last_m.estimate)}); the gate cannot tell a regression from this run's noise: "
            "re-run on a quiet machine")
    return Judgement(Verdict.INCONCLUSIVE, last_j.baseline, last_j.floor, last_j.change, note)


def _capped_words(measurement: Measurement) -> str:
    """How much of a measurement the power cap held the GPU's clocks, where a monitor counted it: a comparison whose
    measurements read apart says whether its card ran them alike."""
    if measurement.power_capped is None:
        return ""
    return f" (power-capped {min(measurement.power_capped, 1.0):.0%} of it)"


def _state(judgement: Judgement, measurement: Measurement) -> str:
    if judgement.verdict == Verdict.REGRESSED:
        return "under the floor"
    return "straddling the floor" if straddles(judgement, measurement.estimate) else judgement.verdict.value


def untimed(fields: Mapping[str, Any], reason: str, closeness: list[Closeness] | None = None, *,
            established: str = "") -> CompareResult:
    return CompareResult(timed=False, verdict=Verdict.UNTIMED, note=f"timing skipped: {reason}", **fields,
                         established=established, **error_fields(closeness or []))


def judge_metric_value(
    metric_id: str, nodeid: str, name: str, hardware_key: str, value: float, *, tolerance: float, direction: str,
    unit: str, entry: Mapping[str, Any] | None, file_found: bool,
) -> MetricResult:
    baseline = entry["value"] if entry else None
    judgement = judge_metric(value, baseline, tolerance, direction, file_found=file_found)
    note = judgement.note
    if judgement.verdict == Verdict.IMPROVED:
        note += f" ({rebless_hint()})"
    return MetricResult(
        metric_id=metric_id, nodeid=nodeid, name=name, hardware_key=hardware_key, value=value, tolerance=tolerance,
        direction=direction, unit=unit, verdict=judgement.verdict, note=f"{name} {note}" if note else "",
        baseline=baseline, change=judgement.change,
    )


def failure_text(
    result: CompareResult | MetricResult, *, baseline_path: Path, artifacts_dir: Path | None,
) -> str:
    """The failure message of one result: what happened and what to do next."""
    metric = isinstance(result, MetricResult)
    ident = result.metric_id if isinstance(result, MetricResult) else result.case_id
    step = next_step(result.verdict, nodeid=result.nodeid, baseline_path=baseline_path,
                     hardware_key=result.hardware_key, artifacts_dir=artifacts_dir, metric=metric)
    return f"{ident}: {result.note or result.verdict.value}\n  {step}"


def outrun_words(m: Measurement) -> str | None:
    """Words for a measurement in whose held batches the device caught up with the host (Timer.outrun), else None:
    said beside a verdict that did not pass, whose times then hold the host's pace."""
    if not m.held_batches or not m.outrun_batches:
        return None
    return (f"the device caught up with the host in {m.outrun_batches} of {m.held_batches} held batches of rounds: "
            "their later calls hold a wait for the host")


def cut_words(m: Measurement) -> str | None:
    """Words for a measurement some of whose held batches were cut into pieces (Timer.pieces), else None: said beside
    a verdict that did not pass, whose calls then started after a hold of their own, not after the call before."""
    if not m.held_batches or not m.cut_batches:
        return None
    return (f"{m.cut_batches} of {m.held_batches} held batches of rounds were cut into pieces, each behind its own "
            "hold: their calls followed a hold, not the call before")


def measured_fields(m: Measurement, j: Judgement) -> dict[str, Any]:
    return dict(
        speedup=m.speedup, reference_ms=m.reference_ms, optimized_ms=m.optimized_ms,
        ci_low=m.estimate.low, ci_high=m.estimate.high, noise=m.estimate.rel_halfwidth,
        reference_cv=m.reference_cv, optimized_cv=m.optimized_cv, rounds=m.rounds, timer=m.timer,
        stopped_by=m.stopped_by, reference_first_ms=m.reference_first_ms, optimized_first_ms=m.optimized_first_ms,
        reference_stats=sample_stats(m.reference_samples), optimized_stats=sample_stats(m.optimized_samples),
        baseline=j.baseline, change=j.change, budget=m.budget(), dropped_rounds=m.dropped_rounds, settled=m.settled,
        held_batches=m.held_batches, outrun_batches=m.outrun_batches, cut_batches=m.cut_batches,
        reference_event_ms=m.event_ms[0] if m.event_ms else None, optimized_event_ms=m.event_ms[1] if m.event_ms else None,
        reference_mhz=m.clock_mhz[0] if m.clock_mhz else None, optimized_mhz=m.clock_mhz[1] if m.clock_mhz else None,
    )


def error_fields(closeness: list[Closeness]) -> dict[str, Any]:
    if not closeness:
        return {}
    return dict(max_abs_error=closeness[0].max_abs_error, rel_error=closeness[0].rel_error)


def samples_record(first: Measurement, final: Measurement) -> dict[str, Any]:
    """The raw samples of a comparison, for the artifacts of a failing test."""
    return {
        "reference_ms": final.reference_samples, "optimized_ms": final.optimized_samples,
        "order": "round i timed reference then optimized when i is even, the other way round when odd",
        "first_measurement": None if first is final else {
            "reference_ms": first.reference_samples, "optimized_ms": first.optimized_samples},
    }
