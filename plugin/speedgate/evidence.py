"""A calibrated entry's evidence: each process's judged speedup and in-process spread, grouped by the card that
measured it, and the tolerance that evidence gives. Pure: dicts in, dicts out (blessing and `python -m speedgate
evidence` write them).

A calibrating bless (--speedgate-calibrate N) adds one process: its speedup and the spread of its N measurements. A
run's report can add its speedups too (evidence.add_reports): one process each, with its in-process spread if the
run calibrated, with none if it was a gate run. A
card is named by an anonymized identity (hardware.card_id); evidence written before cards were recorded sits under
UNRECORDED. The tolerance is max(floor, K x spread), the spread the widest of every kept process's in-process spread
and the spread of all kept processes' speedups pooled over the cards, so the spread between cards of one kind (power
cap, clocks, memory) is in it as soon as two cards gave evidence.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from . import codegen, picks

# K, the floor and the ceiling of a calibrated tolerance; why these values: docs/results/plugin-constants.md and
# docs/results/calibration.md.
CALIBRATION_K = 3.0
CALIBRATION_FLOOR = 0.02
CALIBRATION_CEILING = 0.99  # a tolerance is a fraction in [0, 1): a spread this wide gates nothing but stays valid
PROCESSES_KEPT = 8  # per card, the newest
CARDS_KEPT = 8  # the cards with the newest evidence
UNRECORDED = "unrecorded"  # evidence from before cards were recorded (one or more cards, unknown)


def _expected_range(n: int) -> float:
    """d2(n): the expected range of n standard normal draws (1.128 for 2, 2.326 for 5), by integrating
    1 - F(x)^n - (1 - F(x))^n over x (midpoint rule on [-8, 8]: exact to 4 digits for any n a person would run)."""
    steps, lo, hi = 3200, -8.0, 8.0
    width = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        cdf = 0.5 * (1.0 + math.erf((lo + (i + 0.5) * width) / math.sqrt(2.0)))
        total += 1.0 - cdf**n - (1.0 - cdf) ** n
    return total * width


def between_run_spread(speedups: Sequence[float]) -> float:
    """The between-run standard deviation of a case's speedup relative to its median, estimated from the range of
    its N >= 2 measurements: (max - min) / d2(N) / median. The range, not the MAD: for the 2-10 runs a person
    waits for it is the efficient estimator (quality-control charts use it for the same reason), where the MAD of
    3 runs is often near 0; and a run that jumped widens the tolerance instead of being discarded, which is the
    safe side for a gate, since such a jump is the drift it must tolerate."""
    if len(speedups) < 2:
        raise ValueError(f"a spread needs at least 2 speedups, got {len(speedups)}")
    ordered = sorted(speedups)
    mid = len(ordered) // 2
    middle = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return (ordered[-1] - ordered[0]) / _expected_range(len(ordered)) / middle


def calibrated_tolerance(spread: float) -> float:
    """The tolerance written for a calibrated case: max(CALIBRATION_FLOOR, CALIBRATION_K x spread)."""
    return min(max(CALIBRATION_FLOOR, CALIBRATION_K * spread), CALIBRATION_CEILING)


def round_value(value: Any) -> Any:
    """Four significant digits: enough for a gate with a 10% tolerance, few enough for small diffs."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value


def _numbers(values: Any, *, positive: bool) -> list[float]:
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, (int, float)) and (v > 0 if positive else v >= 0)]


def cards(calibration: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The evidence by card: {card: {"speedups": [...], "run_spreads": [...], "measured_at": ...}}. An entry
    calibrated before cards were recorded reads as one UNRECORDED card holding its process lists."""
    found = calibration.get("machines")
    if isinstance(found, dict):
        return {str(k): dict(v) for k, v in found.items() if isinstance(v, dict)}
    speedups = _numbers(calibration.get("process_speedups"), positive=True)
    spreads = _numbers(calibration.get("process_run_spreads", [calibration.get("spread")]), positive=False)
    if not speedups and not spreads:
        return {}
    return {UNRECORDED: {"speedups": speedups, "run_spreads": spreads, "measured_at": calibration.get("measured_at", "")}}


def add_process(calibration: Mapping[str, Any], card: str | None, speedup: float, run_spread: float | None,
                measured_at: str, report: str | None = None, *, blessed: bool = False) -> dict[str, Any]:
    """calibration with one more process of card (its judged speedup; its in-process spread, None for a gate run;
    the identity of the report it came from, report_identity, kept so that the report is not added twice; blessed:
    the process is a calibrating bless's, written by the bless itself, whose run time the card keeps so that its
    report, given later, is known as already held), the pooled lists and spreads recomputed."""
    by_card = cards(calibration)
    name = card or UNRECORDED
    mine = by_card.pop(name, {"speedups": [], "run_spreads": []})
    reports = [str(r) for r in mine.get("reports", []) if isinstance(r, str)]
    blesses = [str(b) for b in mine.get("blessed", []) if isinstance(b, str)]
    mine = {
        "speedups": [*_numbers(mine.get("speedups"), positive=True), float(speedup)][-PROCESSES_KEPT:],
        "run_spreads": [*_numbers(mine.get("run_spreads"), positive=False),
                        *([] if run_spread is None else [float(run_spread)])][-PROCESSES_KEPT:],
        "measured_at": measured_at,
        **({"reports": [*reports, *([report] if report else [])][-PROCESSES_KEPT:]} if reports or report else {}),
        **({"blessed": [*blesses, *([measured_at] if blessed else [])][-PROCESSES_KEPT:]} if blesses or blessed else {}),
    }
    kept = sorted(by_card.items(), key=lambda item: str(item[1].get("measured_at", "")))[-(CARDS_KEPT - 1):]
    by_card = {**dict(kept), name: mine}
    return summarize({**calibration, "machines": by_card})


def aged_out(before: Any, after: Any) -> list[str]:
    """The cards whose evidence the calibration `before` held and `after`, a full window of CARDS_KEPT cards, no
    longer does: the oldest, dropped to make room (add_process). [] when nothing aged out, and when the evidence
    started again (a re-bless of another setup), which is not aging."""
    old = set(cards(before)) if isinstance(before, Mapping) else set()
    new = set(cards(after)) if isinstance(after, Mapping) else set()
    return sorted(old - new) if len(new) >= CARDS_KEPT else []


def aged_out_line(case_id: str, dropped: Sequence[str]) -> str:
    return (f"{case_id}: the evidence of card {', '.join(dropped)} aged out (a file keeps the {CARDS_KEPT} cards with "
            "the newest evidence); its processes no longer set the tolerance or the center")


def summarize(calibration: Mapping[str, Any]) -> dict[str, Any]:
    """The pooled process lists and the spreads of a calibration's evidence by card."""
    by_card = cards(calibration)
    pooled = [v for c in by_card.values() for v in _numbers(c.get("speedups"), positive=True)]
    run_spreads = [v for c in by_card.values() for v in _numbers(c.get("run_spreads"), positive=False)]
    out = {k: v for k, v in calibration.items()
           if k not in ("process_speedups", "process_run_spreads", "process_spread", "machine_spread")}
    out["machines"] = {name: {**c, "speedups": [round_value(v) for v in c.get("speedups", [])],
                              "run_spreads": [round_value(v) for v in c.get("run_spreads", [])]}
                       for name, c in sorted(by_card.items())}
    out["process_speedups"] = [round_value(v) for v in pooled]
    out["process_run_spreads"] = [round_value(v) for v in run_spreads]
    if len(pooled) >= 2:
        out["process_spread"] = round_value(between_run_spread(pooled))
    found = [_median(_numbers(c.get("speedups"), positive=True)) for name, c in by_card.items() if name != UNRECORDED]
    medians = [m for m in found if m is not None]
    if len(medians) >= 2:
        out["machine_spread"] = round_value(between_run_spread(medians))
    return out


def without_card(calibration: Mapping[str, Any], card: str) -> dict[str, Any]:
    """calibration with one card's evidence left out, summarized again: what that card, were it fresh, would be judged
    by (speedgate.catches, and the lab's leave-one-card-out readings)."""
    return summarize({**calibration, "machines": {n: c for n, c in cards(calibration).items() if n != card}})


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def spread_of(calibration: Mapping[str, Any]) -> float:
    """The spread a calibration's tolerance covers: the widest in-process spread of its processes, and the spread of
    all its processes' speedups pooled over the cards.

    The spread its latest bless wrote (`spread`) stands in for the processes' only where they cannot show one: no
    kept process has an in-process spread, and they are fewer than two or their cards were never recorded. Evidence
    of two processes or more on recorded cards is the newest cards' own; a bless whose process aged out of it no
    longer widens it (one bless's 1.6% between its two runs set an H200 tolerance of 4.9% over eight cards whose
    processes' spread was 0.69%: docs/results/gate-study-h200.md, the eleventh study)."""
    spreads = _numbers(calibration.get("process_run_spreads"), positive=False)
    shown = len(_numbers(calibration.get("process_speedups"), positive=True)) >= 2 and \
        isinstance(calibration.get("machines"), dict)
    if not spreads and not shown:
        spreads = _numbers([calibration.get("spread")], positive=False)
    pooled = calibration.get("process_spread")
    return max([*spreads, *([float(pooled)] if isinstance(pooled, (int, float)) else [])], default=0.0)


def sets_own_tolerance(calibration: Mapping[str, Any]) -> bool:
    """Whether an other pick's evidence sets its own tolerance (tolerance_of): it spans two processes or holds an
    in-process spread. Before that, the pick is judged with the main pick's tolerance."""
    return bool(calibration.get("process_run_spreads")) or len(calibration.get("process_speedups") or []) >= 2


def tolerance_of(calibration: Mapping[str, Any]) -> float:
    return float(round_value(calibrated_tolerance(spread_of(calibration))))


def center_of(calibration: Mapping[str, Any]) -> tuple[float, int] | None:
    """(the median of the recorded cards' median speedups, how many cards) when two cards or more gave evidence;
    None otherwise. Evidence from before cards were recorded is left out: it may be one card or several."""
    medians = [m for name, c in cards(calibration).items() if name != UNRECORDED
               if (m := _median(_numbers(c.get("speedups"), positive=True))) is not None]
    if len(medians) < 2:
        return None
    return float(round_value(_median(medians))), len(medians)


def judged_against(entry: Mapping[str, Any], tolerance: float) -> tuple[float, int]:
    """The speedup a gate judges an entry's case against, and how many cards' evidence it is the center of (0: the
    blessed speedup). With evidence from two cards or more, the kind's center (center_of), not the one card's bless:
    a bless on a card at one end of the kind's spread put every other card's reading near one bound of the band, and
    a drop on a typical card inside it (docs/results/calibration.md, "the center, not the card that blessed"). The
    bless stays the baseline where it lies outside its tolerance of the center and no evidence is newer than it: a
    plain re-bless after the case's code changed keeps the old evidence, and a calibrating one adds itself to it;
    either way the new speedup is what the gate holds the case to. Evidence newer than such a bless outvotes it
    (cards that all read one speed since)."""
    blessed = float(entry["speedup"])
    calibration = entry.get("calibration")
    if not isinstance(calibration, Mapping) or (found := center_of(calibration)) is None:
        return blessed, 0
    center, count = found
    if abs(blessed / center - 1.0) > tolerance:
        newest = max((str(c.get("measured_at", "")) for c in cards(calibration).values()), default="")
        if str(entry.get("measured_at", "")) >= newest:
            return blessed, 0
    return center, count


# A side whose rounds vary by this much (coefficient of variation) in its bless, and by at least NOISIER_BY times the
# other side's, is named as the one that moves.
NOISY_CV = 0.005
NOISIER_BY = 2.0


def noisier_side(entry: Mapping[str, Any]) -> str | None:
    """Which side's rounds varied most within the bless's run, in words, where one did (its coefficient of variation at
    least NOISY_CV and NOISIER_BY times the other's), or both did alike; None otherwise. Within a run, not between
    processes: which side the spread lives in, as far as the entry itself tells (the fp8 4096 pair on H100: the cuBLAS
    reference, docs/results/gate-study.md, section 12)."""
    found = [float(v) for v in (entry.get("reference_cv"), entry.get("optimized_cv"))
             if isinstance(v, (int, float)) and v > 0]
    if len(found) < 2:
        return None
    ref, opt = found
    high, low = max(ref, opt), min(ref, opt)
    if high < NOISY_CV:
        return None
    if high < NOISIER_BY * low:
        return f"both sides' rounds vary within a run (CV {ref:.2%} and {opt:.2%})"
    side, other = ("the reference", "the optimized side") if ref > opt else ("the optimized side", "the reference")
    return f"within a run, {side}'s rounds vary most (CV {high:.2%} against {other}'s {low:.2%})"


def cause_of(entry: Mapping[str, Any]) -> str:
    """What set an entry's tolerance, in words, from its own evidence: the widest in-process spread (and its card), or
    the spread between the processes of its cards (their speedups' range); the case's pin; or the default. Then the
    side whose rounds vary most within a run, where one does (noisier_side)."""
    said = _set_by(entry)
    side = noisier_side(entry)
    return f"{said}; {side}" if side else said


def _set_by(entry: Mapping[str, Any]) -> str:
    calibration = entry.get("calibration")
    if not isinstance(calibration, Mapping) or not calibration:
        return ("no calibration: the tolerance the case was blessed with, its pin (the reason is in a comment beside "
                "its compare()) or the default; a gate run takes the case's pin or the default as they are then")
    by_card = cards(calibration)
    runs = [(v, name) for name, c in by_card.items() for v in _numbers(c.get("run_spreads"), positive=False)]
    pooled = [v for c in by_card.values() for v in _numbers(c.get("speedups"), positive=True)]
    between = calibration.get("process_spread")
    widest = max(runs, default=(0.0, ""))
    recorded = card_count(calibration)
    processes = f"{len(pooled)} process" + ("es" if len(pooled) != 1 else "")
    where = f"{processes} on {recorded} cards" if recorded > 1 else processes
    if isinstance(between, (int, float)) and between >= widest[0] and len(pooled) >= 2:
        return (f"the spread between {where}: {between:.2%} (speedups {min(pooled):.4g}-{max(pooled):.4g}x, "
                f"between cards {calibration.get('machine_spread', 0.0):.2%})")
    card = f" on card {widest[1]}" if widest[1] and widest[1] != UNRECORDED else ""
    return f"the spread between runs in one process: {widest[0]:.2%}{card} (the widest of {where})"


def _calibrated(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """entry's calibration; ValueError if a calibrating bless never wrote one."""
    calibration = entry.get("calibration")
    if not isinstance(calibration, Mapping) or not isinstance(calibration.get("spread"), (int, float)):
        raise ValueError("it has no calibrated evidence: bless it with --speedgate-calibrate N")
    return calibration


def restart(entry: Mapping[str, Any]) -> dict[str, Any]:
    """entry with its evidence started again from its newest calibrating bless alone (that process's speedup,
    in-process spread and card) and its other picks dropped: for a case whose code changed, so that processes of the
    old code no longer set its tolerance or its center. ValueError if the entry has no calibrating bless to start
    from."""
    calibration = _calibrated(entry)
    when, speedup = calibration.get("measured_at"), entry.get("speedup")

    def blessed_here(card: Mapping[str, Any]) -> bool:
        # The bless's card: the one that recorded the bless's time and holds its speedup (gate runs may have come
        # after it); in a file written before blesses recorded their time, the one its time and speedup were
        # written to last. Two cards may bless in one second.
        speedups = _numbers(card.get("speedups"), positive=True)
        if when in card.get("blessed", []):
            return round_value(speedup) in speedups
        return bool(when) and card.get("measured_at") == when and speedups[-1:] == [round_value(speedup)]

    blessed_on = [name for name, c in cards(calibration).items() if blessed_here(c)]
    if len(blessed_on) != 1 or not isinstance(speedup, (int, float)):
        raise ValueError("its newest calibrating bless's process cannot be told apart (two cards blessed it in one "
                         "second at one speedup, or, in a file an earlier speedgate blessed, a gate run's report came "
                         "after it): bless it again with --speedgate-calibrate N first")
    card = None if blessed_on[0] == UNRECORDED else blessed_on[0]
    fresh = add_process({}, card, float(entry["speedup"]), float(calibration["spread"]), str(when), blessed=True)
    fresh.update(runs=calibration.get("runs"), spread=calibration["spread"], measured_at=when)
    out = {k: v for k, v in entry.items() if k != "picks"}
    return {**out, "tolerance": tolerance_of(fresh), "calibration": fresh}


def cleared(entry: Mapping[str, Any]) -> dict[str, Any]:
    """entry with no evidence yet, for a restart from gate runs of the new code (add_reports then adds them): its
    calibration keeps the bless's run count, in-process spread and time, and holds no card; its other picks are
    dropped. ValueError if the entry has no calibrated evidence."""
    calibration = _calibrated(entry)
    kept = {k: calibration[k] for k in ("runs", "spread", "measured_at") if k in calibration}
    return {**{k: v for k, v in entry.items() if k != "picks"}, "calibration": {**kept, "machines": {}}}


def card_count(calibration: Mapping[str, Any]) -> int:
    """How many recorded cards gave evidence (evidence from before cards were recorded counts as none)."""
    return sum(1 for name in cards(calibration) if name != UNRECORDED)


def report_identity(report: Mapping[str, Any]) -> str:
    """A report's identity in the evidence: 12 hex digits of the SHA-256 of its content (keys sorted)."""
    return hashlib.sha256(json.dumps(report, sort_keys=True, default=str).encode()).hexdigest()[:12]


# The report setting a gate study's slowed run carries (speedgate.study stamps it: the share injected); such a
# report is never evidence.
STUDY_SLOWDOWN = "study_slowdown"
# The file a slowed run writes beside its report, <run>.json: <run> + SPINS_SUFFIX (speedgate.injection.spins_file).
SPINS_SUFFIX = ".spins.jsonl"


def _share(share: Any) -> str:
    return f"{share:.0%}" if isinstance(share, (int, float)) else str(share)


def add_reports(doc: Mapping[str, Any], reports: Iterable[Mapping[str, Any]], *, facts_only: bool = False,
                only: Collection[str] = ()) -> tuple[dict[str, Any], list[str], list[str]]:
    """A baseline document with the kernels' codegen facts of gate runs' --speedgate-json reports recorded in the
    entries that have none, or added where an entry's kernels lack a fact the run read and every fact both hold is the
    same (same software; never replacing recorded ones: a re-bless does), and their speedups added
    to its calibrated entries' evidence, one process per report and case (cases measured with the entry's software and timer, whose test did
    not fail for another reason; a calibrating bless's report adds its in-process spread too: a bless on another
    runner, or in a checkout whose file was not kept, joins the evidence as its own file would have); a line for
    each entry whose tolerance changed; and notes: how many entries had their codegen facts recorded, and a line for
    each kind of machine or run left out. The reports must be runs of
    the code the entries were blessed from: evidence of another kernel would only widen its tolerance. Cases a
    report measured on another kind of machine (another hardware key: an H200's run given to the H100's file) are
    not this file's evidence either, nor is any comparison of a test that ran another config than an entry of it
    recorded (an autotuner's other choice: another kernel, on every side it runs), nor a comparison whose
    measurement never settled (settled: false, the device's speed still drifting). A report already in an entry's
    evidence (the same file given again) is not added twice. facts_only: the facts alone, no speedup added anywhere.
    only: the case ids whose records are read (all when empty); a report is known by its whole content all the same,
    so that one given again for its other cases is known as held."""
    cases = {k: dict(v) for k, v in doc["cases"].items()}
    again: dict[str, int] = {}
    changed: dict[str, tuple[float, float]] = {}
    key = doc.get("hardware_key")
    other_keys: dict[str, int] = {}
    other_configs: list[str] = []
    unsettled: list[str] = []
    recorded: list[str] = []
    other_picks: list[tuple[str, bool]] = []
    dropped_picks: list[str] = []
    untimed_picks: list[str] = []
    other_software: dict[str, int] = {}
    other_timers: list[str] = []
    aged: dict[str, list[str]] = {}
    slowed: list[tuple[str, Any]] = []
    for report in reports:
        identity = report_identity(report)
        if (share := (report.get("settings") or {}).get(STUDY_SLOWDOWN)) is not None:
            slowed.append((identity, share))  # a gate study's slowed run: a speed the code does not have
            continue
        # A bless's report: the entries it wrote hold its processes already (_holds_report).
        blessed_at = str(report.get("run_time")) if (report.get("settings") or {}).get("update_baselines") else None
        records = [r for r in report.get("cases", []) if not only or r.get("case_id") in only]
        other_kernel = set()
        for record in records:
            blessed = (cases.get(record.get("case_id")) or {}).get("config")
            if blessed is not None and record.get("config") is not None and record["config"] != blessed:
                other_kernel.add(record.get("nodeid"))
        for record in records:
            if key is not None and record.get("hardware_key") != key:
                other = str(record.get("hardware_key"))
                other_keys[other] = other_keys.get(other, 0) + 1
                continue
            entry = cases.get(record.get("case_id"))
            failed_otherwise = record.get("test_failed") and record.get("verdict") != "regressed"
            if entry and record.get("codegen") and record.get("nodeid") not in other_kernel \
                    and not failed_otherwise and _same_software(entry.get("software", {}), report, key,
                                                                only=codegen.COMPILERS):
                # The kernels' facts are exact: the first run of the entry's compilers and config records them, or
                # the facts its kernels lack (read since the bless), where every fact both hold is the same. A test
                # failed by this comparison's own regression ran the same kernels (its speedup joins the evidence
                # too); one that failed for another reason (a wrong result, a raise) gives nothing.
                if (filled := with_facts(entry, record["codegen"])) is not None:
                    entry = cases[record["case_id"]] = filled
                    recorded.append(record["case_id"])
            if facts_only:
                continue
            if not entry or "calibration" not in entry or not record.get("timed") or not record.get("speedup"):
                continue
            if failed_otherwise:
                continue
            if record.get("timer") != entry.get("timer"):
                other_timers.append(f"{record['case_id']}: timed by {record.get('timer')}, the entry by {entry.get('timer')}")
                continue
            if differs := _software_difference(entry.get("software", {}), report, record.get("hardware_key")):
                other_software[differs] = other_software.get(differs, 0) + 1
                continue
            if record.get("settled") is False:  # the device's speed drifted to the end: no speed of the kernel's
                unsettled.append(record["case_id"])
                continue
            if record.get("nodeid") in other_kernel:
                other_configs.append(record["case_id"])
                continue
            # A calibrating run's in-process spread, read as the file's own evidence is; a gate run has none.
            run_spread = next(iter(_numbers([record.get("calibration_spread")], positive=False)), None)
            when = str(report.get("run_time") or entry["calibration"].get("measured_at", ""))
            if not picks.same_pick(entry.get("codegen"), record.get("codegen")):
                # Another pick is its own evidence, never the main pick's tolerance (speedgate.picks).
                if not all(_numbers([record.get(k)], positive=True) for k in ("reference_ms", "optimized_ms")):
                    untimed_picks.append(record["case_id"])  # no times to judge that pick's sides by
                    continue
                found = picks.matching(entry, record.get("codegen"))
                if _holds_report((found[1].get("calibration") or {}) if found else {}, record.get("card"), identity,
                                 blessed_at):
                    again[identity] = again.get(identity, 0) + 1
                    continue
                before_pick = entry
                entry, new = add_other_pick(entry, found, record, run_spread, when, identity)
                if gone := picks.dropped(before_pick, entry):
                    dropped_picks.append(picks.dropped_line(record["case_id"], gone))
                cases[record["case_id"]] = entry
                other_picks.append((record["case_id"], new))
                continue
            if _holds_report(entry["calibration"], record.get("card"), identity, blessed_at):
                again[identity] = again.get(identity, 0) + 1
                continue
            before = float(entry["tolerance"])
            calibration = add_process(entry["calibration"], record.get("card"), float(record["speedup"]), run_spread,
                                      when, identity)
            if dropped := aged_out(entry["calibration"], calibration):
                aged[record["case_id"]] = sorted({*aged.get(record["case_id"], []), *dropped})
            entry = {**entry, "calibration": calibration, "tolerance": tolerance_of(calibration)}
            cases[record["case_id"]] = entry
            first = changed.get(record["case_id"], (before, before))[0]
            changed[record["case_id"]] = (first, float(entry["tolerance"]))
    lines = [f"{case_id}: tolerance {old:.1%} -> {new:.1%}" for case_id, (old, new) in sorted(changed.items()) if old != new]
    left_out = [f"codegen facts recorded for {len(recorded)} entries that had none or lacked some"] if recorded else []
    left_out += [f"left out: {count} case(s) measured on hardware key {other}, not this file's {key}"
                for other, count in sorted(other_keys.items())]
    left_out += [f"left out: {case_id}: its test ran another config than the file recorded (another kernel)"
                 for case_id in sorted(other_configs)]
    left_out += [f"{case_id}: its kernels were another pick than the bless's: "
                 f"{'a new other pick of the entry' if new else 'added to that pick'}, its own evidence (speedgate.picks)"
                 for case_id, new in sorted(other_picks)]
    left_out += dropped_picks
    left_out += [f"left out: {case_id}: another pick without both sides' times" for case_id in sorted(untimed_picks)]
    left_out += [f"left out: {case_id}: its measurement never settled (the device's speed still drifted when its "
                 "rounds ended)" for case_id in sorted(unsettled)]
    left_out += [f"left out: {count} case(s) of report {identity}: already in this file's evidence (the same report "
                 f"given again, or the bless that wrote them)" for identity, count in sorted(again.items())]
    left_out += [f"left out: {count} case(s) whose entry was blessed with other software ({differs}): a re-bless with "
                 "this software starts their evidence again" for differs, count in sorted(other_software.items())]
    left_out += [f"left out: {line}" for line in sorted(other_timers)]
    left_out += [f"left out: report {identity}: a gate study's run with every optimized side slowed by "
                 f"{_share(share)} (speedgate study), not the code's own speed" for identity, share in slowed]
    by_card: dict[str, int] = {}
    for dropped in aged.values():
        for card in dropped:
            by_card[card] = by_card.get(card, 0) + 1
    left_out += [f"card {card}'s evidence aged out of {count} {'entry' if count == 1 else 'entries'} (a file keeps "
                 f"the {CARDS_KEPT} cards with the newest evidence): its processes no longer set their tolerances or "
                 "centers" for card, count in sorted(by_card.items())]
    return {**doc, "cases": cases}, lines, left_out


def with_facts(entry: Mapping[str, Any], measured: Mapping[str, Any]) -> dict[str, Any] | None:
    """entry with the kernel facts a run recorded where the pick it ran lacks them (codegen.completed: every fact
    both hold the same): the main pick's, or the other pick's whose kernels these are (picks.matching); an entry
    without facts takes the run's. None when nothing is added."""
    if "codegen" not in entry:
        return {**entry, "codegen": dict(measured)}
    if (facts := codegen.completed(entry["codegen"], measured)) is not None:
        return {**entry, "codegen": facts}
    if (found := picks.matching(entry, measured)) is None:
        return None
    index, pick = found
    if (facts := codegen.completed(pick.get("codegen"), measured)) is None:
        return None
    others = list(entry["picks"])
    others[index] = {**pick, "codegen": facts}
    return {**entry, "picks": others}


def add_other_pick(entry: Mapping[str, Any], found: tuple[int, dict[str, Any]] | None, record: Mapping[str, Any],
                   run_spread: float | None, measured_at: str, report: str | None) -> tuple[dict[str, Any], bool]:
    """The entry with a gate run's or bless's process of another pick added to that pick's evidence (`found`: the
    entry's other pick that the record's kernels are, speedgate.picks.matching; None: a new other pick, its
    tolerance the main pick's until its own evidence spans two processes or holds an in-process spread); and
    whether the pick is new. The main pick's evidence and tolerance are not touched."""
    others = [dict(p) for p in entry.get("picks") or [] if isinstance(p, dict)]
    if found is None:
        pick: dict[str, Any] = {name: round_value(record[name]) for name in picks.PICK_FIELDS
                                if record.get(name) is not None and name not in ("tolerance", "calibration")}
        pick["measured_at"] = measured_at
        index, new = len(others), True
        others.append(pick)
    else:
        (index, pick), new = found, False
    calibration = add_process(pick.get("calibration") or {}, record.get("card"), float(record["speedup"]), run_spread,
                              measured_at, report)
    calibration.setdefault("runs", max(2, int(record.get("calibration_runs") or 2)))
    calibration.setdefault("spread", run_spread or 0.0)
    calibration.setdefault("measured_at", measured_at)
    own = sets_own_tolerance(calibration)
    tolerance = tolerance_of(calibration) if own or not entry.get("tolerance") else float(entry["tolerance"])
    others[index] = {**pick, "calibration": calibration, "tolerance": tolerance}
    return {**entry, "picks": others[-picks.PICKS_KEPT:]}, new


def _holds_report(calibration: Mapping[str, Any], card: str | None, identity: str, blessed_at: str | None) -> bool:
    """Whether a calibration's evidence from this card already holds the report `identity` (given again), or, for a
    bless's report (blessed_at: its run's time), the process that bless wrote into this file itself: a calibrating
    bless records its run's time with its card's evidence (`blessed`; in files written before, the card's
    `measured_at` until a later run's evidence replaced it) and no report identity, so that giving its report as well
    would count the one process twice."""
    mine = cards(calibration).get(card or UNRECORDED, {})
    written = blessed_at is not None and (blessed_at in mine.get("blessed", [])
                                          or str(mine.get("measured_at", "")) == blessed_at)
    return identity in mine.get("reports", []) or written


def _software_difference(software: Mapping[str, Any], report: Mapping[str, Any], key: Any,
                         only: Sequence[str] | None = None) -> str:
    """What of an entry's software (only: these packages alone) a report's run did not have, "" when nothing: "torch
    2.11.0 in the file, 2.12.0 in the report". A package the report does not record cannot differ."""
    measured = report.get("fingerprints", {}).get(key, {}).get("software", {})
    return "; ".join(f"{name} {value} in the file, {measured[name]} in the report"
                     for name, value in sorted(software.items())
                     if name in measured and (only is None or name in only) and measured[name] != value)


def _same_software(software: Mapping[str, Any], report: Mapping[str, Any], key: Any,
                   only: Sequence[str] | None = None) -> bool:
    """Whether a report's run used the software an entry was blessed with (torch, triton, the driver...; only: these
    packages alone)."""
    return not _software_difference(software, report, key, only)
