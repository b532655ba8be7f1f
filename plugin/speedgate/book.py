"""The baseline book: each hardware key's baseline file, read and validated once a run, its entries, and which of them
this run left unmatched (no collected test) or unreported (a passing test no longer measures them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .case_ids import matches_a_case

if TYPE_CHECKING:
    from .case_ids import CaseIds


def entries_of(doc: Mapping[str, Any]) -> list[str]:
    """A baseline document's entries, cases and metrics, sorted."""
    return sorted([*doc["cases"], *doc.get("metrics", {})])


class BaselineBook:
    """The baseline files of one run, in one folder (<hardware_key>.json each). Reading one raises BaselineError
    when it is unusable; blessing replaces a document (docs) with what it wrote."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.docs: dict[str, dict[str, Any] | None] = {}  # hardware key -> its validated document (None: no file)
        # The entries each file held when the run (its first reader: an xdist worker's collection) read it: an entry
        # a bless finds that is not among them was written by another run meanwhile.
        self.entries_read: dict[str, set[str]] = {}

    def path_for(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def doc_for(self, key: str) -> dict[str, Any] | None:
        """The validated baseline document of key (None when there is no file), read once per run."""
        if key not in self.docs:
            from . import baseline as baseline_file

            doc = self.docs[key] = baseline_file.read(self.path_for(key))
            self.entries_read.setdefault(key, set() if doc is None else set(entries_of(doc)))
        return self.docs[key]

    def found(self, key: str) -> bool:
        return self.doc_for(key) is not None

    def entry(self, case_id: str, key: str) -> dict[str, Any] | None:
        """A comparison's entry in key's file (None: none, or no file)."""
        doc = self.doc_for(key)
        return None if doc is None else doc["cases"].get(case_id)

    def test_entries(self, key: str, case: str) -> list[dict[str, Any]]:
        """The comparisons' entries of one test in key's file: its case id, and '<case>::<name>' for each name (a
        deadline is derived from them). [] when there is no file or it is unusable (the fixture says why)."""
        from .baseline import BaselineError

        try:
            doc = self.doc_for(key)
        except BaselineError:
            return []
        cases = {} if doc is None else doc["cases"]
        return [entry for case_id, entry in cases.items() if case_id == case or case_id.startswith(case + "::")]

    def metric(self, metric_id: str, key: str) -> dict[str, Any] | None:
        """A metric's entry in key's file (None: none, or no file)."""
        doc = self.doc_for(key)
        return None if doc is None else doc.get("metrics", {}).get(metric_id)

    def absorb(self, entries_read: Mapping[str, Iterable[str]]) -> None:
        """An xdist worker's first view of each file: the entries every reader saw from the start."""
        for key, entries in entries_read.items():
            mine = self.entries_read.get(key)
            self.entries_read[key] = set(entries) if mine is None else mine & set(entries)

    def unmatched_entries(self, key: str, ids: CaseIds) -> dict[str, Any] | None:
        """Which entries (cases and metrics) of key's baseline file this run's collected tests left unmatched (see
        case_ids.orphaned_entries); None when there is no file or no collected test uses perf. BaselineError if
        unusable."""
        doc = self.doc_for(key)
        if doc is None or not ids.collected_cases:
            return None
        entries = entries_of(doc)
        matched, orphaned = ids.orphaned(entries)
        return {"hardware_key": key, "baseline": str(self.path_for(key)), "entries": len(entries),
                "matched": matched, "orphaned": orphaned}

    def unreported_entries(self, key: str, passed: set[str], reported: set[str]) -> list[str]:
        """key's baseline entries (cases and metrics) whose test finished and passed in this run (passed: their case
        ids) without measuring them (reported: the ids measured on key): the test no longer makes that comparison or
        metric (renamed, removed, made only on some runs), so nothing gates the entry. BaselineError if the file is
        unusable."""
        doc = self.doc_for(key)
        if doc is None:
            return []
        return [entry for entry in entries_of(doc) if entry not in reported and matches_a_case(entry, passed)]


__all__ = ["BaselineBook", "entries_of"]
