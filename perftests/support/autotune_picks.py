"""max-autotune's picks, held: what inductor's autotuner leaves in a compile's cache folder (the GEMM choices' timings
and pad_mm's in its local cache, `cache/<system hash>`; each Triton kernel's best config, `<dir>/<key>.best_config`),
read from one compile's folder and written into an empty one before another compile, which then takes the same
picks without timing a candidate. A baseline entry keeps them as its config (perf.blessed_config), so a gate run
compiles the kernels the bless timed instead of the winners of a new race: which near-equal candidate wins differs
between processes, and the model's speed with it (docs/results/gate-study-h200.md, "max-autotune's picks, held").

The cache keys carry the software (torch's key, the device, CUDA and Triton versions): after an upgrade the held
picks match nothing, the compile times its candidates again, and `timed_afresh` names what it timed.
Pure: no torch here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

LOCAL_CACHE = "cache"  # <inductor cache dir>/cache/<system hash>: {"system": ..., "cache": {op: {inputs: ...}}}
BEST_CONFIG = ".best_config"


def read_picks(folder: Path) -> dict[str, Any]:
    """The autotuner's picks in an inductor cache folder: {"local": {file name: its JSON}, "best_configs":
    {path relative to the folder: its JSON}}; empty dicts where the compile left none."""
    local: dict[str, Any] = {}
    for path in sorted((folder / LOCAL_CACHE).glob("*")):
        data = _json(path)
        if isinstance(data, dict) and isinstance(data.get("cache"), dict):
            local[path.name] = _finite(data)
    best: dict[str, Any] = {}
    for path in sorted(folder.rglob(f"*{BEST_CONFIG}")):
        data = _json(path)
        if isinstance(data, dict):
            best[path.relative_to(folder).as_posix()] = data
    return {"local": local, "best_configs": best}


def write_picks(folder: Path, picks: Mapping[str, Any]) -> int:
    """Write held picks (read_picks' form) into an inductor cache folder before its first compile; the number of
    files written. Refuses a path that would leave the folder, or picks of another form."""
    if not isinstance(picks.get("local"), Mapping) or not isinstance(picks.get("best_configs"), Mapping):
        raise ValueError(f"not autotuner picks (read_picks' form: 'local' and 'best_configs'): keys {sorted(picks)}")
    files = {f"{LOCAL_CACHE}/{name}": _timings(data) for name, data in picks["local"].items()}
    files.update(picks["best_configs"])
    for relative, data in files.items():
        path = PurePosixPath(relative)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"a held pick's path leaves the cache folder: {relative!r}")
        target = folder.joinpath(*path.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=1, sort_keys=True))
    return len(files)


def timed_afresh(held: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a compile seeded with `held` timed itself where it held nothing (read_picks of its folder afterwards,
    `after`): each local cache entry (op, inputs, precision, choice) and each best config it added. Empty: every
    pick it needed was held."""
    added = sorted(set(_leaves(after.get("local", {}))) - set(_leaves(held.get("local", {}))))
    before, now = held.get("best_configs", {}), after.get("best_configs", {})
    return added + sorted(f"best config {path}" for path in set(now) - set(before))


def searched_again(held: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The held best configs a compile rewrote with another config (its search ran again from the held one; the time
    the search took aside), by path."""
    before, now = held.get("best_configs", {}), after.get("best_configs", {})
    return sorted(path for path in set(now) & set(before) if _config(now[path]) != _config(before[path]))


def as_held(held: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The picks a compile seeded with `held` used (read_picks of its folder afterwards, `after`), with every best
    config whose settings are the held one's given as held: inductor rewrites a best config it loaded with its own
    bookkeeping (the time the load took, its Triton cache hash, whether a search found it), which is no other
    config, so a compile that took every held pick records the held picks themselves. What it timed afresh or
    searched again stays as it found it."""
    before = held.get("best_configs", {})
    best = {path: before[path] if path in before and _config(config) == _config(before[path]) else config
            for path, config in after.get("best_configs", {}).items()}
    return {**after, "best_configs": best}


# A best config's bookkeeping, not its settings: inductor's loader pops these before it matches a config (torch
# 2.11's and 2.13's _load_cached_autotuning alike; found_by_coordesc only picks how it rebuilds the same settings).
BOOKKEEPING = frozenset({"time_taken_ms", "triton_cache_hash", "found_by_coordesc"})


def _config(best: Any) -> Any:
    return {key: value for key, value in best.items() if key not in BOOKKEEPING} if isinstance(best, Mapping) else best


def summary(picks: Mapping[str, Any]) -> str:
    """A line for a report: how many choices' timings and best configs the picks hold."""
    return f"{len(_leaves(picks.get('local', {})))} timed choices, {len(picks.get('best_configs', {}))} best configs"


def _leaves(local: Mapping[str, Any]) -> list[str]:
    """Every timed entry of the local caches, as 'file/op/inputs/precision/choice' (pad_mm's and others' keys as
    deep as they go)."""
    out: list[str] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(f"{prefix}/{key}", value)
        else:
            out.append(prefix)

    for name, data in local.items():
        walk(name, data.get("cache", {}) if isinstance(data, Mapping) else {})
    return out


# A candidate that failed to compile or run is timed at infinity; a baseline file holds finite numbers only, so the
# picks carry such a timing as its name and give it back as a float when written.
NONFINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _finite(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _finite(value) for key, value in node.items()}
    if isinstance(node, float) and not math.isfinite(node):
        return "NaN" if math.isnan(node) else ("Infinity" if node > 0 else "-Infinity")
    return node


def _timings(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {key: _timings(value) for key, value in node.items()}
    return NONFINITE.get(node, node) if isinstance(node, str) else node


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
