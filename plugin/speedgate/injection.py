"""The slowed run of a gate study (`python -m speedgate study`): a pytest plugin, loaded as `-p speedgate.injection`
with SPEEDGATE_STUDY_SLOWDOWN=share, that slows every optimized side by `share` of its time.

Before every call of an optimized side it queues a spin kernel on the timed stream and keeps the host busy as long
(less what the spin's launch cost it), sized from that side's blessed time (its own, without an entry) and settled on
the gate's own clock for it, so that the call takes `share` longer whether the GPU or the host bounds it (a side the
gate counts in SM cycles: the spin's cycles at the full clock, unsettled; on the CPU's clock, the host's wait alone).
With SPEEDGATE_STUDY_SPINS=path it appends one line per comparison to that file, saying how its slowdown was sized
(the target, its basis, the spin's cycles as sized and as settled, the host's wait); spins_of reads them back.
Without SPEEDGATE_STUDY_SLOWDOWN it does nothing.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .evidence import SPINS_SUFFIX
from .timers.cuda import CudaTimer, IdleStart, capture_graph
from .timers.cycles import CYCLES_TIMER, full_clock_mhz

SLOWDOWN_ENV = "SPEEDGATE_STUDY_SLOWDOWN"
# Where a slowed run writes, one JSON line per comparison, how its slowdown was sized (spins_of reads them back).
SPINS_ENV = "SPEEDGATE_STUDY_SPINS"
# A clock's time_each: each callable called once, its time in ms (speedgate.timers.Timer.time_each).
TimeEach = Callable[[Sequence[Callable[[], Any]]], list[float]]


def slowed(optimized: Callable[..., Any], share: float, torch: Any, spin_cost: Callable[[], tuple[float, float]] | None,
           host_wait: Callable[[float], None] | None = None, basis_ms: float | None = None,
           replays: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None,
           noted: Callable[[dict[str, Any]], None] | None = None, timed: TimeEach | None = None,
           counted_at: float | None = None, spin_launch: Callable[[], float] | None = None) -> Callable[..., Any]:
    """optimized, made slower by `share` of its time, whatever bounds it: before every call a spin kernel on the
    current stream (a GPU-bound side waits for it) and a busy wait of the host as long (a launch-bound side, or one
    timed from an idle device, waits for that); the two overlap, so the call takes `share` longer either way.

    Its time is `basis_ms`, the side's time in its baseline entry: what the gate measured of it, held or as graph
    replays (the first call, eager and alone, can take twice that). Without an entry, the side's own device time,
    measured after its first call (7 calls, events, median). The first call runs it plain. The spin is then sized
    from its cost on the GPU the side has just warmed (`spin_cost`: cycles per ms and the fixed cost of a launch),
    and settled where it runs (settle_spin): a spin's cycles take longer at the clock the side holds the GPU at than
    at the clock of spins alone, so a spin sized from that clock alone landed heavier than asked
    (docs/results/gate-study.md, section 9). `replays`: for a side the gate times as graph replays, what captures a
    callable into one (settle_spin times the replays: the side's eager calls can be bound by the host). `timed`: the
    gate's own clock for the side (its timer's time_each: each call between events, the L2 flushed, the device held
    or idle as the gate times it), on which settle_spin times the spin. `counted_at`: for a side the gate counts in
    SM cycles (timers.cycles), the cycles per ms its samples are counted at (the full SM clock): a spin adds its own
    cycles there at any clock, so it is sized at that rate and not settled (settled on the clock's time, the spins
    the settling cut landed at a median +3% of +5%: docs/results/gate-study-h200.md). Without `spin_cost` (a
    side timed on the host's clock, the CPU's) the host's wait alone slows it, and its time without an entry is its
    own host-timed median. `spin_launch`: what launching the spin costs the host (ms, spin_launch_ms), taken off the
    host's wait: where the host bounds the side it pays both, and a side of a few microseconds took twice its share
    (the graph breaks' at +5%: +9.0% and +10.2%, docs/results/gate-study-h200.md). `noted` is told how the slowdown
    was sized, once: the target, its basis, the spin's cycles as sized from the rate and as settled (0 without a
    spin), and the host's wait."""
    from .timers import median_event_ms

    wait = host_wait or busy_wait
    delay: list[tuple[int, float]] = []

    @functools.wraps(optimized)
    def run(*args: Any, **kwargs: Any) -> Any:
        if delay:
            if delay[0][0]:
                torch.cuda._sleep(delay[0][0])
            wait(delay[0][1])
            return optimized(*args, **kwargs)
        out = optimized(*args, **kwargs)
        alone = lambda: optimized(*args, **kwargs)  # noqa: E731
        if spin_cost is None:
            target, sized, cycles, rate = share * (basis_ms if basis_ms else host_median_ms(alone)), 0, 0, {}
        else:
            target = share * (basis_ms if basis_ms else median_event_ms(torch, alone))
            cycles_per_ms, fixed_ms = spin_cost()
            if counted_at:
                sized = cycles = max(1, round((target - fixed_ms) * counted_at))
            else:
                sized = max(1, round((target - fixed_ms) * cycles_per_ms))
                cycles = settle_spin(torch, alone, sized, target, replays, timed)
            rate = {"cycles_per_ms": counted_at or cycles_per_ms, "fixed_ms": fixed_ms}
        waited = max(0.0, target - spin_launch()) if cycles and spin_launch else target
        delay.append((cycles, waited))
        if noted:
            noted({"share": share, "basis_ms": basis_ms, "target_ms": target, **rate, "sized_cycles": sized,
                   "cycles": cycles, "host_wait_ms": waited})
        return out

    return run


SETTLE_TRIES = 3
SETTLE_BATCH_MS = 5.0  # device time of one batch of the side's calls
SETTLED = 0.1  # the spin adds its target within this share of it
TRUSTED = (0.5, 2.0)  # what a spin can add against its target at another clock; outside it, the batches mislead


def settle_spin(torch: Any, call: Callable[[], Any], cycles: int, target_ms: float,
                replays: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None,
                timed: TimeEach | None = None) -> int:
    """The spin's cycles corrected where it runs, up to SETTLE_TRIES times until it adds `target_ms` within SETTLED:
    the cycles scaled by what the spin added against the target. What it added: with `timed` (the gate's own clock
    for the side: each call between events, the L2 flushed before it, the device held or idle as the gate times it),
    one batch of the side and spin + side alternating, after one batch that teaches the clock its hold, the medians'
    difference; without, batches of `call` alone and of spin + call back to back (about SETTLE_BATCH_MS each, three
    of each alternating, medians). Back-to-back batches are not the gate's rounds: unflushed, bound by the host where
    the gate holds the device, they settled a flex attention side's spin for +5% at what the gate then measured as
    +1.5% (docs/results/gate-study-h200.md). A clock moves a spin's time by tens of percent, not by factors: where
    the spin adds less than half its target or more than twice it, the batches do not show it as the gate's rounds
    will, and the cycles stay as sized. The host's wait slows a side the host bounds. With `replays` (a side timed as
    graph replays) the batches replay graphs of the side and of spin + side, captured anew for each try; a side that
    cannot be captured here is settled on its eager calls."""
    from .timers import median_event_ms

    def timed_as(fn: Callable[[], Any]) -> Callable[[], Any]:
        if replays is None:
            return fn
        try:
            return replays(fn)
        except Exception:  # noqa: BLE001 - the gate's own capture is what judges the case; settle on eager calls
            return fn

    plain = timed_as(call)
    per_call = median_event_ms(torch, plain, calls=3)
    count = max(3, min(64, round(SETTLE_BATCH_MS / max(per_call, 1e-3))))

    def batch_ms(fn: Callable[[], Any]) -> float:  # count calls back to back between two events, per call
        return median_event_ms(torch, functools.partial(_repeated, fn, count), calls=1) / count

    def added_ms(spun: Callable[[], Any]) -> float:
        if timed is not None:
            batch = [plain, spun] * count
            timed(batch)  # the clock learns its hold for these calls
            times = timed(batch)
            return statistics.median(times[1::2]) - statistics.median(times[0::2])
        pairs = [(batch_ms(plain), batch_ms(spun)) for _ in range(3)]
        return statistics.median(b for _, b in pairs) - statistics.median(a for a, _ in pairs)

    for _ in range(SETTLE_TRIES):
        added = added_ms(timed_as(functools.partial(_spun, torch, cycles, call)))
        if not TRUSTED[0] * target_ms <= added <= TRUSTED[1] * target_ms or abs(added - target_ms) <= SETTLED * target_ms:
            break
        cycles = max(1, round(cycles * target_ms / added))
    return cycles


def _repeated(fn: Callable[[], Any], count: int) -> None:
    for _ in range(count):
        fn()


def _spun(torch: Any, cycles: int, call: Callable[[], Any]) -> None:
    torch.cuda._sleep(cycles)
    call()


def spin_cost(torch: Any) -> tuple[float, float]:
    """The spin kernel's device time now: cycles per ms, and the ms a launch adds beyond its cycles. Spins of two
    lengths, ten back to back between two events (the device's time, not the host's), the medians of 5 such."""
    from .timers import median_event_ms

    def per_spin(cycles: int) -> float:
        ten = functools.partial(_repeated, functools.partial(torch.cuda._sleep, cycles), 10)
        return median_event_ms(torch, ten, calls=5) / 10

    short, long = 20_000, 2_000_000
    torch.cuda._sleep(short)  # a first launch, not timed
    t_short, t_long = per_spin(short), per_spin(long)
    rate = (long - short) / (t_long - t_short) if t_long > t_short else long / max(t_long, 1e-9)
    return rate, max(0.0, t_short - short / rate)


def spin_launch_ms(torch: Any, calls: int = 21, clock: Callable[[], float] = time.perf_counter) -> float:
    """What launching a spin kernel costs the host, in ms (not the spin's run: a one-cycle spin, launched and not
    waited for): the median of `calls` launches, each on the host's clock, after one untimed; then the device is
    waited for."""
    torch.cuda._sleep(1)
    times = []
    for _ in range(calls):
        start = clock()
        torch.cuda._sleep(1)
        times.append((clock() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def host_median_ms(fn: Callable[[], Any], calls: int = 7) -> float:
    """The median of `calls` calls of fn on the host's clock."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def note_spin(path: str, case_id: str, sized: Mapping[str, Any]) -> None:
    """One line of a slowed run's spins file: how one comparison's slowdown was sized. Appended in one write, so that
    xdist workers writing the same file do not interleave their lines."""
    line = json.dumps({"case_id": case_id, **sized}) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


def spins_file(out: Path, label: str) -> Path:
    """Where the run `label` of a study in `out` writes how its slowdowns were sized, beside its report."""
    return out / f"{label}{SPINS_SUFFIX}"


def spins_of(out: Path, label: str) -> dict[str, dict[str, Any]]:
    """How each comparison's slowdown was sized in the run `label` of a study in `out`, by case id ({} before any);
    a line cut off by a killed run is skipped."""
    path = spins_file(out, label)
    found: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            sized = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(sized, dict) and "case_id" in sized:
            found[str(sized["case_id"])] = sized
    return found


def busy_wait(ms: float) -> None:
    """The host kept busy for `ms` (a sleep would hand the core to another thread and wake late)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def gate_clock(timer: Any, blessed_timer: Any, torch: Any) -> tuple[TimeEach | None, float | None]:
    """How the gate will time a slowed side, as `slowed` takes it: (timed, counted_at). By its entry's timer (what
    the gate timed it with when it was blessed): counted in SM cycles, the full SM clock's cycles per ms and no
    clock to settle on; else the CUDA timer's own time_each, from an idle device where the entry was timed so
    (IdleStart), held otherwise. (None, None) for any other clock (the CPU's, a project's own): settled as before."""
    if not isinstance(timer, CudaTimer):
        return None, None
    if blessed_timer == CYCLES_TIMER:
        mhz = full_clock_mhz(torch)
        if mhz:
            return None, mhz * 1e3
    return functools.partial(timer.time_each, idle=blessed_timer == IdleStart.name), None


def pytest_configure(config: Any) -> None:
    share = os.environ.get(SLOWDOWN_ENV)
    if not share:
        return
    spins = os.environ.get(SPINS_ENV)
    import torch

    from .fixture import Perf

    plain = Perf.compare

    @functools.wraps(plain)
    def compare(self: Any, reference: Callable[..., Any], optimized: Callable[..., Any], **kwargs: Any) -> Any:
        entry = self._entry(kwargs.get("name")) or {}
        blessed = entry.get("optimized_ms")
        basis = float(blessed) if isinstance(blessed, (int, float)) and blessed > 0 else None
        replays = functools.partial(capture_graph, torch) if kwargs.get("graph") else None
        timer = self._timer or self._session.bench.timer()
        on_gpu = getattr(timer, "on_gpu", False)
        costs = functools.partial(spin_cost, torch) if on_gpu else None  # on the CPU the host's wait alone
        launch = functools.partial(spin_launch_ms, torch) if on_gpu else None
        noted = functools.partial(note_spin, spins, self._case_id_of(kwargs.get("name"))) if spins else None
        timed, counted_at = gate_clock(timer, entry.get("timer"), torch)
        return plain(self, reference, slowed(optimized, float(share), torch, costs, basis_ms=basis, replays=replays,
                                             noted=noted, timed=timed, counted_at=counted_at, spin_launch=launch),
                     **kwargs)

    Perf.compare = compare  # type: ignore[method-assign]
    config.add_cleanup(lambda: setattr(Perf, "compare", plain))


__all__ = ["SLOWDOWN_ENV", "SPINS_ENV", "busy_wait", "gate_clock", "note_spin", "settle_spin", "slowed", "spin_cost",
           "spin_launch_ms", "spins_file", "spins_of"]
