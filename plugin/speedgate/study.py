"""`python -m speedgate study`: what a gate catches. Gate runs of a selection, clean and with a slowdown injected into
every optimized side, and per comparison which slowdowns it caught.

    python -m speedgate study OUT [--slowdowns 0.02,0.05,0.10] [--runs 1] [--repeat 1] [--page PAGE.md] -- PYTEST ARGS

Every run is a fresh `python -m pytest PYTEST ARGS` in this folder, against the baseline files the project's
settings name (read, never written), with `--speedgate-json OUT/<run>.json`. A slowed run loads the injection as a
plugin (`-p speedgate.injection`, SPEEDGATE_STUDY_SLOWDOWN=share: every optimized side's call takes `share` longer,
whether the GPU or the host bounds it; speedgate.injection says how). A comparison catches a slowdown when each
run slowed by it failed it without --speedgate-strict: regressed or inconclusive (a pick-changed is shown beside the
count, not counted). Clean runs count false alarms (regressed, improved, inconclusive) of the comparisons, and every
run, slowed or not, of the metrics (the injection slows no metric; each named under the table), and, apart, the
tests of the clean runs that failed before a comparison of theirs was judged (an audit's accusation, an exception:
the report's failed_tests; each named under the table). A slowdown
that did not reach the optimized side (it ran less than half the share slower than in the clean runs, on the same
card where there is one; against its reference where the timer counts the host's work; unless it ran other kernels
than the clean runs and its traces show the spin took half its share or more: then it arrived) is said in its cell and
counted apart, as a miss even where the run failed if its clean runs failed too (what failed those failed it); so is
one that landed heavier than asked (more than HEAVY times the share): its catch is a catch of the slowdown it got,
not of the share. A miss whose slowdown reached says how far, and where the card's clean runs read against the
speedup judged against. The table goes to OUT/study.md and the terminal, its last line "N of M comparisons catch a 5%
regression" (M without the heavy ones when there are any); --page writes it as a results page naming the date, the
GPU and the cards. Runs whose report exists are kept, so a study cut off goes on where it stopped. Each slowed run
also writes OUT/<run>.spins.jsonl, one line per comparison saying how its slowdown was sized, to tell why one did not
land as asked (speedgate.injection.spins_of reads it)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import codegen
from .devices import busy
from .evidence import STUDY_SLOWDOWN
from .injection import SLOWDOWN_ENV, SPINS_ENV, spins_file
from .reporting import dump_json
from .timers.base import CpuTimer
from .timers.cuda import IdleStart

CAUGHT = ("regressed", "inconclusive")  # what fails a run without --speedgate-strict
FALSE_ALARMS = ("regressed", "improved", "inconclusive")
# Timers whose samples hold the host's work (from an idle device, or the CPU's own clock): the host's state moves both
# sides alike, so `delivered` takes the side against its reference.
HOST_TIMED = (IdleStart.name, CpuTimer.name)
# A slowdown that reached its optimized side at more than this many times its share landed heavier than asked: a catch
# of it says nothing of the share (docs/results/gate-study.md, "The injection's size").
HEAVY = 1.5
# The kernel the injection launches before a slowed side's call (torch.cuda._sleep's), by the name the profiler gives
# it ("at::cuda::(anonymous namespace)::spin_kernel(long)"): new work of the study's, not another pick.
SPIN_KERNEL = "spin_kernel"


def run_pytest(out: Path, label: str, args: Sequence[str], *, slowdown: float | None = None,
               cwd: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One fresh pytest process of a study (its report kept as OUT/<label>.json, reused when it exists): `args` and
    the injection's plugin (speedgate.injection), in `env` (this process's environment by default) with the slowdown,
    or none, that this run injects; tools/gate_study.py runs its blesses and gate runs through it too."""
    report = out / f"{label}.json"
    if report.exists():
        print(f"{label}: kept from an earlier run", flush=True)
        loaded: dict[str, Any] = json.loads(report.read_text())
        return loaded
    run_env = {k: v for k, v in (os.environ if env is None else env).items() if k not in (SLOWDOWN_ENV, SPINS_ENV)}
    if slowdown:
        run_env[SLOWDOWN_ENV] = str(slowdown)
        spins = spins_file(out, label)
        run_env[SPINS_ENV] = str(spins.resolve())
        spins.unlink(missing_ok=True)  # a run cut off before leaves its lines: start again
    cmd = [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "-p", "speedgate.injection",
           "--speedgate-json", str(report)]
    log = out / f"{label}.log"
    try:
        # The run's output goes to its log as it runs: a run of the whole suite takes minutes, and one cut off (a
        # deadline, a lost machine) still leaves the verdicts it printed.
        with log.open("w") as sink:
            proc = subprocess.run(cmd, cwd=cwd, env=run_env, stdout=sink, stderr=subprocess.STDOUT, text=True)
    except KeyboardInterrupt:  # a report of the cases the run got to is no whole run: run it again next time
        set_aside(report)
        raise
    lines = log.read_text().strip().splitlines()
    print(f"{label}: exit {proc.returncode}: {lines[-1] if lines else ''}", flush=True)
    if proc.returncode not in (0, 1) or not report.exists():
        set_aside(report)
        raise SystemExit(f"speedgate study: {label}: pytest exited {proc.returncode} without a complete report; see "
                         f"{out / f'{label}.log'}")
    loaded = json.loads(report.read_text())
    if slowdown:  # never evidence of the code's speed (speedgate.evidence.add_reports leaves it out)
        loaded.setdefault("settings", {})[STUDY_SLOWDOWN] = slowdown
        report.write_text(dump_json(loaded))
    return loaded


def set_aside(report: Path) -> None:
    """An interrupted or failed run's report is renamed, so that the next study runs it again."""
    if report.exists():
        report.replace(report.with_suffix(".incomplete.json"))


def timed_cases(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["case_id"]: c for c in report.get("cases", []) if c.get("timed")}


def unjudged_failures(report: Mapping[str, Any]) -> set[str]:
    """The tests a run failed that none of its own verdicts explains: in the report's failed_tests, with no comparison
    or metric of that test judged other than pass there. Such a test raised before its comparison was judged (an
    audit's accusation, an exception, a failed check): in a clean run, a false alarm the verdicts do not count."""
    said = {r.get("nodeid") for r in [*report.get("cases", []), *report.get("metrics", [])] if r.get("verdict") != "pass"}
    return set(report.get("failed_tests", [])) - said


def cause_in(report: Mapping[str, Any], nodeid: str) -> str | None:
    """What failed a test in a run, as its report says (failure_causes), or None where it says nothing."""
    return report.get("failure_causes", {}).get(nodeid)


def delivered(clean: Sequence[Mapping[str, Any]], slowed: Sequence[Mapping[str, Any]]) -> float | None:
    """How much slower one comparison's optimized side ran in slowed runs than in clean ones: per slowed run, its
    optimized median over the clean runs' median (those on its card, when there are any) - 1; the median of those.
    None without both.

    Where the timer counts the host's work (IdleStart: each call from an idle device; the CPU's clock), the host's
    state moves both sides' times between processes alike, by half and more (docs/results/gate-study-h200.md), so
    the optimized side is taken against its own reference: the clean runs' speedup over the slowed run's - 1."""
    found = []
    for run in slowed:
        host_timed = run.get("timer") in HOST_TIMED
        base = _on_cards(clean, {run.get("card")}, functools.partial(_cost, host_timed=host_timed))
        now = _cost(run, host_timed)
        if base and now:
            found.append(now / statistics.median(base) - 1.0)
    return statistics.median(found) if found else None


def clean_offset(clean: Sequence[Mapping[str, Any]], slowed: Sequence[Mapping[str, Any]]) -> float | None:
    """Where one comparison's clean runs read against the speedup they were judged against: the median change of
    those on the slowed runs' cards (of all, when none is), None without one. A card that reads above the kind's
    center takes that much of a slowdown inside the band: a miss where the slowdown landed as asked is the
    tolerance's and this offset's (docs/results/gate-study-h200.md, the eighteenth study)."""
    change = lambda c: c["change"] if isinstance(c.get("change"), (int, float)) else None  # noqa: E731
    found = _on_cards(clean, {run.get("card") for run in slowed}, change)
    return statistics.median(found) if found else None


def _on_cards(clean: Sequence[Mapping[str, Any]], cards: set[Any],
              value: Callable[[Mapping[str, Any]], float | None]) -> list[float]:
    """`value` of each clean run that has one (not None): those on `cards` where any are, else all of them."""
    found = [(c.get("card") in cards, v) for c in clean if (v := value(c)) is not None]
    return [v for same, v in found if same] or [v for _, v in found]


def spun(slowed: Sequence[Mapping[str, Any]]) -> float | None:
    """What the study's spin added to one comparison's optimized side's kernels, as its traces saw it: per slowed run
    timed with the device held, the spin kernel's share of the side's kernel time over the other kernels' (share /
    (1 - share)); the median. It tells that a spin arrived where the side's time cannot (its process drew another pick
    than the clean run's), not how much it slowed the side: a spin settled on the gate's clock also fills the gaps
    between a short side's launches, which no kernel's share holds. None unless every slowed run is so timed and
    records the spin's share."""
    found = []
    for run in slowed:
        shares = [k.get("share") for k in ((run.get("codegen") or {}).get("optimized") or [])
                  if SPIN_KERNEL in str(k.get("name", ""))]
        if not str(run.get("timer", "")).endswith("-held") or len(shares) != 1 or not isinstance(shares[0], (int, float)):
            return None
        if not 0.0 < shares[0] < 1.0:
            return None
        found.append(shares[0] / (1.0 - shares[0]))
    return statistics.median(found) if found else None


def _cost(case: Mapping[str, Any], host_timed: bool) -> float | None:
    """A comparison's optimized side as `delivered` weighs it: its time, or, host-timed, its time over its
    reference's (1 / speedup). None where the record has none."""
    value = case.get("speedup") if host_timed else case.get("optimized_ms")
    return (1.0 / float(value) if host_timed else float(value)) if value else None


def alarm_words(alarmed: Sequence[Mapping[str, Any]]) -> str:
    """What a comparison's false alarms in the clean runs were, beside their count: each verdict other than regressed,
    and a host that was busy (devices.busy) when one was judged."""
    said = sorted({str(c["verdict"]) for c in alarmed} - {"regressed"})
    said += sorted({f"host load {c['host_load']:.1f} on {c['host_cores']} cores" for c in alarmed
                    if busy(c.get("host_load"), c.get("host_cores"))})
    return f" ({'; '.join(said)})" if said else ""


def repicked(clean: Sequence[Mapping[str, Any]], slowed: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every slowed run of a comparison ran other optimized-side kernels than every clean run did, the
    study's spin aside (speedgate.codegen.changes: another pick, such as an inductor pointwise kernel at another block
    size): where such a slowdown landed short or heavy, the pick's own speed is in the number. False where the runs
    recorded no kernels."""
    def optimized(case: Mapping[str, Any]) -> dict[str, list[Any]] | None:
        kernels = [k for k in ((case.get("codegen") or {}).get("optimized") or [])
                   if SPIN_KERNEL not in str(k.get("name", ""))]
        return {"optimized": kernels} if kernels else None

    was = [k for c in clean if (k := optimized(c))]
    now = [k for c in slowed if (k := optimized(c))]
    return bool(was and now) and all(codegen.changes(a, b) for a in was for b in now)


def on_another_card(clean: Sequence[Mapping[str, Any]], slowed: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every slowed run of a comparison was measured on a card no clean run of it was (xdist hands a file to
    either worker): where a slowdown "landed" then holds the difference between the cards too."""
    was = {c.get("card") for c in clean}
    now = {c.get("card") for c in slowed}
    return bool(now) and None not in (was | now) and not (was & now)


def table(clean: Sequence[Mapping[str, Any]], slowed_runs: Mapping[float, Sequence[Mapping[str, Any]]],
          share: float = 0.05) -> str:
    """Per comparison its tolerance, false alarms in the clean runs and, per slowdown, the runs that caught it and
    the speedup's median change; then the totals and the catch line for `share`.

    A slowdown is checked for having reached the optimized side as asked (`delivered`): where that side ran less
    than half the share slower than in the clean runs (another pick, the host's state or an injection that missed
    its stream; not a side that ran another pick than the clean runs whose traces show the spin arrived, spun), or
    more than HEAVY times the share, the cell says so, and the totals count those apart: a miss of a
    slowdown that did not arrive, and a catch of a heavier one, say nothing of what the gate catches at the share. A
    slowed run that failed where its slowdown did not arrive, of a comparison whose clean runs failed too, failed for
    what failed those (another pick): no catch, counted with the misses the slowdown did not reach.
    A miss whose slowdown reached says how far, and where the card's clean runs read against the speedup they were
    judged against (clean_offset): what the band took of it. The summary says where the slowdowns landed (the median
    over comparisons)."""
    cases: dict[str, dict[str, Any]] = {}
    for report in [*clean, *(r for runs in slowed_runs.values() for r in runs)]:
        for case_id, case in timed_cases(report).items():
            cases.setdefault(case_id, case)
    shares = sorted(slowed_runs)
    head = ["comparison", "tolerance", "timer", "false alarms", *(f"+{s:.0%}: caught, median change" for s in shares)]
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: | --- | ---: |" + " --- |" * len(shares)]
    alarms = trials = improved = 0
    catches = {s: 0 for s in shares}
    unreached = {s: 0 for s in shares}
    unreached_failed = {s: 0 for s in shares}
    heavy = {s: 0 for s in shares}
    unrecorded = {s: 0 for s in shares}
    landed: dict[float, list[float]] = {s: [] for s in shares}
    unjudged_in = [(unjudged_failures(r), timed_cases(r)) for r in clean]  # each clean run's, once
    for case_id, case in sorted(cases.items()):
        runs = [c for r in clean if (c := timed_cases(r).get(case_id))]
        alarmed = [c for c in runs if c["verdict"] in FALSE_ALARMS]
        wrong = len(alarmed)
        alarms, trials = alarms + wrong, trials + len(runs)
        improved += sum(c["verdict"] == "improved" for c in alarmed)
        unjudged = sum(case.get("nodeid") in failed and case_id not in timed for failed, timed in unjudged_in)
        row = [f"`{case_id}`", f"{case['tolerance']:.1%}", str(case.get("timer", "-")),
               f"{wrong}/{len(runs)}{alarm_words(alarmed)}"
               + (f", and its test failed before it was judged in {unjudged} clean run(s)" if unjudged else "")]
        for s in shares:
            got = [c for r in slowed_runs[s] if (c := timed_cases(r).get(case_id))]
            hit = sum(c["verdict"] in CAUGHT for c in got)
            reached = delivered(runs, got)
            if reached is not None:
                landed[s].append(reached)
            short = reached is not None and reached < s / 2
            heavier = reached is not None and reached > s * HEAVY
            # Short against a clean run of other kernels, the side's time holds the pick's speed: where the traces
            # show the spin took its share, it arrived, and a miss is the gate's (a faster pick judged against
            # another's speedup: docs/results/gate-study-h200.md, the sixteenth and seventeenth studies).
            repick = repicked(runs, got)
            arrived = spun(got) if short and repick else None
            if arrived is not None and arrived >= s / 2:
                short = False
            else:
                arrived = None
            # Failed where the slowdown did not reach, as its clean runs failed: what failed those (another pick, the
            # host) failed it, not the slowdown. A short reach beside clean runs that passed stays a catch: read on
            # another card, the clean run's time is that card's.
            otherwise = short and wrong > 0 and bool(got) and hit == len(got)
            if got and hit == len(got) and not otherwise:
                if heavier:
                    heavy[s] += 1
                else:
                    catches[s] += 1
            elif short:
                unreached[s] += 1
                unreached_failed[s] += otherwise
            changes = [c["change"] for c in got if c.get("change") is not None]
            # The verdicts beside regressed and pass, caught or not: a pick-changed passes a run without strict.
            kinds = sorted({c["verdict"] for c in got} - {"regressed", "pass"})
            said = f"{hit}/{len(got)}" + (f" ({', '.join(kinds)})" if kinds else "")
            against = " against its reference" if case.get("timer") in HOST_TIMED else ""
            tail = ""
            if not got:  # the slowed run raised or skipped before the comparison was timed
                unrecorded[s] += 1
                causes = sorted({cause for r in slowed_runs[s] if (cause := cause_in(r, case.get("nodeid", "")))})
                tail = f" (not timed in the slowed run: {'; '.join(causes) if causes else 'see its log'})"
            elif (short or heavier or arrived is not None) and reached is not None:
                card = " on another card" if on_another_card(runs, got) else ""
                pick = ", on other kernels than in the clean run (another pick)" if repick else ""
                came = (f"; the spin took {arrived:+.1%} of its other kernels' time in the trace: it arrived"
                        if arrived is not None else "")
                tail = (f" (the optimized side {reached:+.1%}{against} from the clean run{card}{pick}{came}"
                        f"{', heavier than asked' if heavier else ''}{', failed as its clean run did: no catch' if otherwise else ''})")
            elif hit < len(got) and reached is not None and (offset := clean_offset(runs, got)) is not None:
                # Reached and missed: how far it reached, and where the card's clean run read against the band, say why.
                tail = (f" (missed: the optimized side {reached:+.1%}{against} from the clean run, "
                        f"whose speedup read {offset:+.1%} from the one judged against)")
            row.append((f"{said}, {statistics.median(changes):+.1%}" if changes else said) + tail)
        lines.append("| " + " | ".join(row) + " |")
    total = len(cases)
    # A metric (compile seconds, peak memory, a count) that fails a run turns it red as a comparison does. The
    # injection slows perf.compare's optimized sides alone, never a metric: a slowed run's metrics are clean readings,
    # and one that fails there is a false alarm too (the nineteenth H200 study's compile seconds, at +5%).
    every_run = [*((f"clean{i}", r) for i, r in enumerate(clean)),
                     *((f"+{s:.0%} run {i}", r) for s, at_share in slowed_runs.items() for i, r in enumerate(at_share))]
    metrics = [(label, m) for label, r in every_run for m in r.get("metrics", [])]
    cried = [(label, m) for label, m in metrics if m.get("verdict") in FALSE_ALARMS]
    failed_unjudged = sorted((nodeid, i) for i, (failed, _) in enumerate(unjudged_in) for nodeid in failed)
    summary = [f"false alarms: {alarms} of {trials} comparison-runs" if trials else "no clean runs"]
    if improved:  # counted: a run under --speedgate-strict fails on it, and the band it left is the kind's evidence
        summary[0] += f" ({improved} of them improved, which fails a run only under --speedgate-strict)"
    if metrics:
        summary[0] += f" and {len(cried)} of {len(metrics)} metric-runs"
    if failed_unjudged:
        summary[0] += (f", and {len(failed_unjudged)} test(s) of the clean runs failed before a comparison of theirs "
                       "was judged")
    for s, n in catches.items():
        apart = ([f"{heavy[s]} more caught where the slowdown landed heavier than {s * HEAVY:.1%}"] if heavy[s] else [])
        if unreached[s]:
            failed = unreached_failed[s]
            apart.append(f"{unreached[s]} missed where the slowdown did not reach the optimized side"
                         + (f", {failed} of them failed by something else" if failed else ""))
        apart += [f"{unrecorded[s]} not timed in the slowed run"] if unrecorded[s] else []
        where = f"; landed at a median {statistics.median(landed[s]):+.1%}" if landed[s] else ""
        summary.append(f"+{s:.0%} caught in {n} of {total} comparisons" + (f" ({', '.join(apart)})" if apart else "")
                       + where)
    caught = catches.get(share)
    asked = total - heavy.get(share, 0)
    line = (f"{caught} of {asked} comparisons catch a {share:.0%} regression" if caught is not None
            else f"no run slowed by {share:.0%}")
    if heavy.get(share):
        line += f" (and {heavy[share]} caught one that landed heavier than {share * HEAVY:.1%}, left out)"
    # Counts every run's records hold, added up over the runs and said where any is not 0, so that a study shows how
    # often each happened: traces the profiler lost and the audit took again (timers.cuda.LostTrace), and held
    # batches the timer cut into pieces, each behind its own hold (Timer.pieces), whose calls followed a hold, not the
    # call before, which moved a side's time (docs/results/gate-study-h200.md, "Two more fresh cards").
    for field, words in (("traces_lost", "lost trace(s) taken again"), ("cut_batches", "held batch(es) cut into pieces")):
        counted = [(c["case_id"], n) for _, r in every_run for c in r.get("cases", []) if (n := c.get(field))]
        if counted:
            summary.append(f"{sum(n for _, n in counted)} {words}, in {len({c for c, _ in counted})} comparison(s)")
    named = "\n".join([*(f"- a metric of {label}, `{m.get('metric_id', '?')}`: {m['verdict']} ({_number(m.get('value'))} "
                          f"against {_number(m.get('baseline'))})" for label, m in cried),
                        *(f"- a clean run's test `{nodeid}`: failed before a comparison of it was judged: "
                          f"{cause_in(clean[i], nodeid) or 'see its log'} (clean{i}.log)"
                          for nodeid, i in failed_unjudged)])
    return "\n".join(lines) + ("\n\n" + named if named else "") + "\n\n" + "; ".join(summary) + "\n\n" + line + "\n"


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def page(text: str, reports: Sequence[Mapping[str, Any]], command: str) -> str:
    """The study as a results page: the date, the GPU and the cards of its runs, then the table."""
    keys = sorted({c.get("hardware_key", "?") for r in reports for c in r.get("cases", [])})
    cards = sorted({c["card"] for r in reports for c in r.get("cases", []) if c.get("card")})
    dates = sorted({str(r.get("run_time", ""))[:10] for r in reports if r.get("run_time")})
    software: Mapping[str, Any] = next((fp.get("software", {}) for r in reports for fp in r.get("fingerprints", {}).values()), {})
    said = ", ".join(f"{k} {v}" for k, v in sorted(software.items()) if k in ("torch", "triton"))
    return (f"# The gate study on {', '.join(keys) or '?'}\n\nMeasured {', '.join(dates) or '?'} on card(s) "
            f"{', '.join(cards) or '?'} ({said}), by `{command}`: {len(reports)} gate runs, each a fresh process.\n\n"
            + text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speedgate study [options] OUT -- PYTEST ARGS",
                                     description=__doc__.split("\n\n")[0],
                                     epilog="Everything after -- goes to pytest (the selection, -k, options).")
    parser.add_argument("out", type=Path, help="folder for the runs' reports, logs and study.md")
    parser.add_argument("--slowdowns", default="0.02,0.05,0.10",
                        help="injected slowdowns, fractions of the optimized side's time (default: 0.02,0.05,0.10)")
    parser.add_argument("--runs", type=int, default=1, help="clean gate runs (default: 1)")
    parser.add_argument("--repeat", type=int, default=1, help="gate runs per slowdown (default: 1)")
    parser.add_argument("--page", type=Path, default=None, help="also write the table as a results page here")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.pytest_args = argv[cut + 1:]
    try:
        shares = [float(s) for s in args.slowdowns.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--slowdowns must be fractions separated by commas, got {args.slowdowns!r}")
    if any(not 0.0 < s < 1.0 for s in shares) or args.runs < 0 or args.repeat < 1:
        parser.error("--slowdowns must lie in (0, 1), --runs must be >= 0 and --repeat >= 1")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        clean = [run_pytest(out, f"clean{i}", args.pytest_args) for i in range(args.runs)]
        slowed_runs = {s: [run_pytest(out, f"slow{s:g}-{i}", args.pytest_args, slowdown=s) for i in range(args.repeat)]
                       for s in shares}
    except KeyboardInterrupt:  # Ctrl-C: the run it cut was set aside (run_pytest); the ones before it are kept
        print(f"speedgate study: interrupted; the runs done are kept in {out}: the same command goes on from them",
              file=sys.stderr)
        return 130
    text = table(clean, slowed_runs)
    (out / "study.md").write_text(text)
    print(text, end="")
    if args.page is not None:
        reports = [*clean, *(r for runs in slowed_runs.values() for r in runs)]
        args.page.write_text(page(text, reports, "python -m speedgate study " + " ".join(argv)))
    return 0


__all__ = ["clean_offset", "main", "page", "run_pytest", "set_aside", "spun", "table"]
