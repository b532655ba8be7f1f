"""Which tolerance a comparison is judged with: one rule, used by the gate, by blessing and by `compare`.

The rule, first that applies: the case's own `tolerance=` (pinned in its compare() call); the tolerance its baseline
entry was calibrated to (an entry with `calibration` evidence); the run's configured default (--speedup-tolerance or
ini speedgate_tolerance); the hardware key's default (DEFAULT_CPU_TOLERANCE on a `cpu-...` key, else
DEFAULT_TOLERANCE). Pure: no pytest, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The only definitions of these defaults: options.py and the reports take them from here.
DEFAULT_TOLERANCE = 0.10
# The default on CPU hardware keys: timing on a shared CPU box moves far more between runs than on a quiet GPU; the
# measurement that chose 35% is in docs/results/plugin-constants.md and docs/results/cpu.md.
DEFAULT_CPU_TOLERANCE = 0.35

# Where a resolved tolerance came from, in the order the rule tries them.
PINNED = "case"
CALIBRATED = "calibrated"
CONFIGURED = "configured"
KEY_DEFAULT = "default"
SOURCES = (PINNED, CALIBRATED, CONFIGURED, KEY_DEFAULT)

# Above this, a run's report and the file's results page say what set the tolerance (evidence.cause_of), and what the
# case still catches: a tolerance over 5% lets a 5% regression through.
WIDE_TOLERANCE = 0.05


@dataclass(frozen=True)
class Tolerance:
    """A tolerance and where it came from (one of SOURCES)."""

    value: float
    source: str


def is_cpu_key(hardware_key: str) -> bool:
    """Whether results under this hardware key were measured on a CPU: the key is named 'cpu-...'. The name, not the
    detected hardware, decides, so a case's default is the same wherever its baseline file is gated."""
    return hardware_key.startswith("cpu-")


def key_default(hardware_key: str) -> float:
    """The tolerance of a case on this hardware key when nothing else names one."""
    return DEFAULT_CPU_TOLERANCE if is_cpu_key(hardware_key) else DEFAULT_TOLERANCE


def default_for(hardware_key: str, configured: float | None) -> Tolerance:
    """The run's default for a case that names no tolerance and has no calibrated entry."""
    if configured is not None:
        return Tolerance(float(configured), CONFIGURED)
    return Tolerance(key_default(hardware_key), KEY_DEFAULT)


def calibrated(entry: Mapping[str, Any] | None) -> float | None:
    """The tolerance a baseline entry was calibrated to, or None when the entry carries no calibration evidence
    (an uncalibrated entry's `tolerance` only records what the case was blessed with)."""
    if not entry or "calibration" not in entry or not isinstance(entry.get("tolerance"), (int, float)):
        return None
    return float(entry["tolerance"])


def resolve(hardware_key: str, *, pinned: float | None, entry: Mapping[str, Any] | None,
            configured: float | None) -> Tolerance:
    """The tolerance a comparison is judged with (the module's rule)."""
    if pinned is not None:
        return Tolerance(float(pinned), PINNED)
    from_entry = calibrated(entry)
    if from_entry is not None:
        return Tolerance(from_entry, CALIBRATED)
    return default_for(hardware_key, configured)


__all__ = ["CALIBRATED", "CONFIGURED", "DEFAULT_CPU_TOLERANCE", "DEFAULT_TOLERANCE", "KEY_DEFAULT", "PINNED",
           "SOURCES", "Tolerance", "calibrated", "default_for", "is_cpu_key", "key_default", "resolve"]
