"""Case ids: the id a collected test's comparisons and metrics have in baseline files and reports (its file relative
to the project's anchor, then the rest of its node id), and what collection found, merged across xdist workers."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# What marks a project's top folder when pytest found no ini file above the tests: pytest's own config files, a
# setup.py, a checkout (.git is a file in a git worktree).
PROJECT_MARKERS = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg",
                   "setup.py", ".git")


def case_anchor(folder: Path, inipath: Path | None, args_folder: Path | None = None) -> Path | None:
    """The folder that case ids of test files in folder are relative to; None when nothing marks one.

    It depends on where the files lie, never on how pytest was invoked (pytest's rootdir moves with the working
    directory, with --rootdir, and with a path given as a separate option value, such as `--baseline-dir /abs`):
    the ini file's folder when the tests lie under it; else the nearest ancestor holding a project marker; else the
    topmost ancestor holding a conftest.py; else, in a bare folder of test files, args_folder (the folder of the
    paths the run was given, see args_folder) when the tests lie under it.
    """
    if inipath is not None and folder.is_relative_to(inipath.parent):
        return inipath.parent
    chain = (folder, *folder.parents)
    for candidate in chain:
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    with_conftest = [candidate for candidate in chain if (candidate / "conftest.py").is_file()]
    if with_conftest:
        return with_conftest[-1]
    return args_folder if args_folder is not None and folder.is_relative_to(args_folder) else None


def args_folder(args: Iterable[str], invocation_dir: Path) -> Path:
    """The common folder of the existing paths among a run's parsed arguments (a file counts as its folder), else the
    invocation folder: pytest's rootdir rule without an ini file, applied to the arguments after parsing. pytest's
    own rootdir is found before plugins' options are known, so `--baseline-dir /abs` (a value as its own word)
    counts /abs as a test path and moves it."""
    common: Path | None = None
    for arg in args:
        path = Path(os.path.normpath(invocation_dir / arg.partition("::")[0]))
        if not path.exists():
            continue
        folder = path if path.is_dir() else path.parent
        common = folder if common is None else Path(os.path.commonpath([common, folder]))
    return common or invocation_dir


def case_base(nodeid: str, test_file: Path, anchor: Path | None) -> str:
    """A collected test's case id, before any compare name: its file relative to the anchor ('/'-separated), then
    the rest of its node id. Without an anchor, the node id (relative to the rootdir, as pytest wrote it)."""
    if anchor is None:
        return nodeid
    rest = nodeid.partition("::")[2]
    path = test_file.relative_to(anchor).as_posix()
    return f"{path}::{rest}" if rest else path


class AnchoredIds:
    """Test ids (case_base) of one run's tests, each test folder's anchor found once. A node id without its file
    (what an xdist controller, which collects nothing, has) finds the file under the run's rootdir."""

    def __init__(self, inipath: Path | None, args_folder: Path | None, rootpath: Path | None = None) -> None:
        self._ini, self._args, self._root = inipath, args_folder, rootpath
        self._anchor_of: dict[Path, Path | None] = {}

    @classmethod
    def of_run(cls, config: Any) -> AnchoredIds:
        """The ids of a pytest run's tests (its ini file, rootdir and arguments)."""
        return cls(config.inipath, args_folder(config.args, config.invocation_params.dir), Path(config.rootpath))

    def anchor(self, folder: Path) -> Path | None:
        if folder not in self._anchor_of:
            self._anchor_of[folder] = case_anchor(folder, self._ini, self._args)
        return self._anchor_of[folder]

    def __call__(self, nodeid: str, test_file: Path | None = None) -> str:
        if test_file is None:
            test_file = (self._root or Path.cwd()) / nodeid.partition("::")[0]
        return case_base(nodeid, test_file, self.anchor(test_file.parent))


def matches_a_case(entry: str, cases: set[str]) -> bool:
    """Whether a baseline entry belongs to one of the cases: it is one, or one followed by '::<name>'."""
    if entry in cases:
        return True
    at = entry.find("::")
    while at != -1:
        if entry[:at] in cases:
            return True
        at = entry.find("::", at + 2)
    return False


def orphaned_entries(entries: Iterable[str], cases: set[str], files: set[str], anchors: Iterable[str]) -> tuple[int, list[str]]:
    """(how many entries matched a collected case, the orphaned ones): entries that match no collected case though
    their file was collected, or though their file no longer exists. Entries of an existing file that was not
    collected (a path selection, --ignore, a skipped module) are out of this run's view: neither."""
    roots = [Path(a) for a in anchors]
    matched, orphaned = 0, []
    for entry in entries:
        if matches_a_case(entry, cases):
            matched += 1
            continue
        test_file = entry.partition("::")[0]
        if test_file in files or (roots and not any((root / test_file).exists() for root in roots)):
            orphaned.append(entry)
    return matched, orphaned


def whole_files_collected(config: Any) -> bool:
    """Whether collection took whole test files: --lf narrows it to the failed tests of a file that had failures
    (and skips the other files), before any hook sees the items."""
    cache = getattr(config, "cache", None)
    return not (bool(config.getoption("lf", False)) and cache is not None and bool(cache.get("cache/lastfailed", {})))


class CaseIds:
    """What collection found before -k/-m deselected any (a deselected test still exists), and each test's case id.
    Under xdist each worker collects and the controller, which collects nothing itself, merges theirs (absorb)."""

    def __init__(self) -> None:
        self.case_bases: dict[str, str] = {}  # node id of a test using perf -> its case id
        self.collected_cases: set[str] = set()  # case ids of the tests using perf
        self.collected_files: set[str] = set()  # test files that yielded tests, as case ids write them
        self.anchors: set[str] = set()  # the folders those case ids are relative to
        self.unmarked_anchors: set[str] = set()  # those that are only the folder of the paths the run was given

    def note_collected(self, items: Iterable[tuple[str, Path, bool]], inipath: Path | None,
                       args_folder: Path | None = None, whole_files: bool = True) -> None:
        """Record the collected tests, (node id, test file, uses perf), and give each one its case id (args_folder:
        see case_anchor). whole_files=False: collection took only some tests of each file (--lf), so an entry of a
        collected file that matches no collected test is out of view, not orphaned."""
        ids = AnchoredIds(inipath, args_folder)
        for nodeid, test_file, uses_perf in items:
            folder = test_file.parent
            anchor = ids.anchor(folder)
            base = ids(nodeid, test_file)
            if whole_files:
                self.collected_files.add(base.partition("::")[0])
            if uses_perf:
                self.case_bases[nodeid] = base
                self.collected_cases.add(base)
                if anchor is not None:
                    self.anchors.add(str(anchor))
                    if case_anchor(folder, inipath) is None:  # nothing marks a project: the invocation decided
                        self.unmarked_anchors.add(str(anchor))

    def case_id(self, nodeid: str, name: str | None = None) -> str:
        """The id a comparison or metric of this test has in baseline files and reports: '<case>' or
        '<case>::<name>'. A test collection did not see keeps its node id."""
        base = self.case_bases.get(nodeid, nodeid)
        return base if name is None else f"{base}::{name}"

    def absorb(self, cases: Iterable[str], files: Iterable[str], anchors: Iterable[str],
               unmarked_anchors: Iterable[str]) -> None:
        """An xdist worker's collection."""
        self.collected_cases.update(cases)
        self.collected_files.update(files)
        self.anchors.update(anchors)
        self.unmarked_anchors.update(unmarked_anchors)

    def orphaned(self, entries: Iterable[str]) -> tuple[int, list[str]]:
        """(how many of a baseline file's entries matched a collected case, the orphaned ones): see orphaned_entries."""
        return orphaned_entries(entries, self.collected_cases, self.collected_files, self.anchors)


__all__ = ["AnchoredIds", "CaseIds", "args_folder", "case_anchor", "case_base", "matches_a_case", "orphaned_entries",
           "whole_files_collected"]
