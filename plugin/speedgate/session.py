"""One pytest run's speedgate state: fingerprint, baseline, timer, results, and the work at the end."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .hardware import Fingerprint, detect, multi_gpu_key, visible_gpu_tokens

# The plugin makes a session when a test asks for perf, and at the end of every xdist worker; what only timing, a
# baseline or the controller needs is imported where it is used, so a worker that never timed does not load it.
if TYPE_CHECKING:
    from .ceilings import Ceilings
    from .devices import Assignment
    from .gpu_state import Monitor
    from .options import Settings
    from .results import CompareResult, MetricResult
    from .timers import Timer

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


def _matches_a_case(entry: str, cases: set[str]) -> bool:
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
        if _matches_a_case(entry, cases):
            matched += 1
            continue
        test_file = entry.partition("::")[0]
        if test_file in files or (roots and not any((root / test_file).exists() for root in roots)):
            orphaned.append(entry)
    return matched, orphaned


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def callers_outside_speedgate(depth: int = 30) -> list[tuple[str, int, int]]:
    """(file, first line of the function, line) of the frames outside this package, innermost first: where a test (or
    a helper it called) asked for perf.compare or perf.metric."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back  # type: ignore[assignment]
    sites: list[tuple[str, int, int]] = []
    while frame is not None and len(sites) < depth:
        sites.append((frame.f_code.co_filename, frame.f_code.co_firstlineno, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
    return sites


class SpeedgateSession:
    """One pytest run's state: what the fixture asks for (fingerprint, baselines, timer, ceilings) and what the run
    produced (typed results, test outcomes, fingerprints), merged across xdist workers."""

    def __init__(self, settings: Settings, assignment: Assignment | None = None) -> None:
        self.settings = settings
        self._assignment = assignment  # a pinned xdist worker's device; else looked up at the first device turn
        self._assignment_known = assignment is not None
        self._fingerprint: Fingerprint | None = None
        # Each hardware key's baseline document, read and validated once (None: no file); blessing replaces it.
        # The entries each file held when the run (its first reader: an xdist worker's collection) read it: an entry
        # a bless finds that is not among them was written by another run meanwhile.
        self.entries_read: dict[str, set[str]] = {}
        self._absorbed_contention: list[dict[str, Any]] = []  # xdist workers' CPU contention counts
        self.docs: dict[str, dict[str, Any] | None] = {}
        self._timer: Timer | None = None
        self.records: list[CompareResult] = []
        self.metric_records: list[MetricResult] = []
        self.failed_nodeids: set[str] = set()
        self.passed_nodeids: set[str] = set()
        self._passed_cases_absorbed: set[str] = set()  # workers' passed tests, as case ids
        self.test_seconds: dict[str, float] = {}  # node id of a test using perf -> its setup, call and teardown
        self.lost_workers: list[str] = []  # xdist workers that ended without their closing report  # tests whose call passed (a run cut short blesses only these)
        self._call_passed: set[str] = set()  # tests whose call passed, their teardown not yet reported
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.progress: Callable[[str], None] | None = None  # told each comparison's id as it finishes (the deadline)
        self.call_sites: dict[str, list[tuple[str, int, int]]] = {}  # case or metric id -> where it was asked for
        self.used = False
        self._ceilings: Ceilings | None = None
        self.ceilings_seen: dict[str, dict[str, Any]] = {}
        self.monitor: Monitor | None = None
        self.gpu_state_at_start: dict[str, str] = {}
        self.workers: dict[str, dict[str, Any]] = {}  # xdist worker id -> the device it was pinned to
        self._gpu_counts: dict[str, int] = {}  # multi-GPU hardware key -> its GPU count
        # What collection found, before -k/-m deselected any (a deselected test still exists): under xdist, each
        # worker's, merged on the controller, which collects nothing itself.
        self.case_bases: dict[str, str] = {}  # node id of a test using perf -> its case id
        self.collected_cases: set[str] = set()  # case ids of the tests using perf
        self.collected_files: set[str] = set()  # test files that yielded tests, as case ids write them
        self.anchors: set[str] = set()  # the folders those case ids are relative to
        self.unmarked_anchors: set[str] = set()  # those that are only the folder of the paths the run was given
        self._anchor_of: dict[Path, Path | None] = {}  # test folder -> its anchor, found once

    # -- case ids ----------------------------------------------------------------------------------------------
    def note_collected(self, items: Iterable[tuple[str, Path, bool]], inipath: Path | None,
                       args_folder: Path | None = None, whole_files: bool = True) -> None:
        """Record the collected tests, (node id, test file, uses perf), and give each one its case id (args_folder:
        see case_anchor). whole_files=False: collection took only some tests of each file (--lf), so an entry of a
        collected file that matches no collected test is out of view, not orphaned."""
        for nodeid, test_file, uses_perf in items:
            folder = test_file.parent
            if folder not in self._anchor_of:
                self._anchor_of[folder] = case_anchor(folder, inipath, args_folder)
            anchor = self._anchor_of[folder]
            base = case_base(nodeid, test_file, anchor)
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

    def unmatched_entries(self, key: str) -> dict[str, Any] | None:
        """Which entries (cases and metrics) of key's baseline file this run's collected tests left unmatched (see
        orphaned_entries); None when there is no file or no collected test uses perf. BaselineError if unusable."""
        doc = self.doc_for(key)
        if doc is None or not self.collected_cases:
            return None
        entries = sorted([*doc["cases"], *doc.get("metrics", {})])
        matched, orphaned = orphaned_entries(entries, self.collected_cases, self.collected_files, self.anchors)
        return {"hardware_key": key, "baseline": str(self.baseline_path_for(key)), "entries": len(entries),
                "matched": matched, "orphaned": orphaned}

    # -- what the fixture asks for ---------------------------------------------------------------------------
    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            self._fingerprint = detect(self.settings.hardware_key)
        return self._fingerprint

    @property
    def hardware_key(self) -> str:
        return self.fingerprint.key

    @property
    def baseline_path(self) -> Path:
        return self.baseline_path_for(self.hardware_key)

    def baseline_path_for(self, key: str) -> Path:
        return self.settings.baseline_dir / f"{key}.json"

    def multi_gpu_key(self, world_size: int) -> str:
        """The hardware key of results measured across world_size GPUs of this machine ('2x-nvidia-h200'); its
        fingerprint is this one's with the GPU count."""
        key = multi_gpu_key(self.hardware_key, world_size)
        self._gpu_counts[key] = world_size
        return key

    def load_baseline(self) -> None:
        """Read and validate this hardware's baseline file once; BaselineError if it is unusable."""
        self.doc_for(self.hardware_key)

    def doc_for(self, key: str) -> dict[str, Any] | None:
        """The validated baseline document of key (None when there is no file), read once per run."""
        if key not in self.docs:
            from . import baseline as baseline_file

            doc = self.docs[key] = baseline_file.read(self.baseline_path_for(key))
            self.entries_read.setdefault(key, set() if doc is None else {*doc["cases"], *doc.get("metrics", {})})
        return self.docs[key]

    @property
    def baseline_found(self) -> bool:
        return self.baseline_found_for(self.hardware_key)

    def baseline_found_for(self, key: str) -> bool:
        return self.doc_for(key) is not None

    def baseline_entry(self, case_id: str, key: str | None = None) -> dict[str, Any] | None:
        doc = self.doc_for(key or self.hardware_key)
        return None if doc is None else doc["cases"].get(case_id)

    def baseline_metric(self, metric_id: str) -> dict[str, Any] | None:
        doc = self.doc_for(self.hardware_key)
        return None if doc is None else doc.get("metrics", {}).get(metric_id)

    def record_metric(self, result: MetricResult) -> None:
        self.used = True
        self.metric_records.append(result)
        self._note_fingerprint(result.hardware_key)
        self._note_call_site(result.metric_id)
        if self.progress is not None:
            self.progress(result.metric_id)

    def timer(self) -> Timer:
        if self._timer is None:
            from .gpu_state import open_monitor
            from .measure import warm_statistics
            from .timers import make_timer

            warm_statistics()
            self._timer = make_timer(self.settings.timer)
            if self._timer.on_gpu:  # its GPU's state is watched, and it cools before timing begins
                tokens = visible_gpu_tokens()
                self.monitor = open_monitor(tokens[0] if tokens else "0")
                if self.monitor is not None:
                    from .gpu_state import wait_until_cool

                    cooling = wait_until_cool(self.monitor.read)
                    state = (cooling.after if cooling else self.monitor.read()).describe()
                    self.gpu_state_at_start[self.hardware_key] = f"{state} ({cooling.describe()})" if cooling else state
            # What NVML does not report (SM count, L2) the CUDA timer read off the device: keep it.
            for name, value in self._timer.properties.items():
                self.fingerprint.hardware.setdefault(name, value)
        return self._timer

    def card(self) -> str | None:
        """The anonymized identity of the card this process times on (None on the CPU)."""
        return self.fingerprint.card

    def software(self) -> dict[str, Any]:
        """The software versions of this run's fingerprint."""
        return dict(self.fingerprint.software)

    def _own_contention(self) -> dict[str, Any] | None:
        """This process's host-clock contention counts (None when it timed nothing with the host clock)."""
        contention = getattr(self._timer, "contention", None)
        if contention is None or not contention.samples:
            return None
        torch = sys.modules.get("torch")
        if torch is not None:
            contention.threads = int(torch.get_num_threads())
        return dataclasses.asdict(contention)

    def contention_warning(self) -> str | None:
        """The warning when the host clock's timed calls, in this process or any xdist worker, were contended."""
        from .devices import CpuContention, slowed_sides

        total = CpuContention()
        for counts in (self._own_contention(), *self._absorbed_contention):
            if counts:
                total.add(counts)
        return total.words(slowed_sides(self.records, total.clocks))

    def roofline(
        self, timer: Timer, flops: float | None, nbytes: float | None, flops_dtype: str | None
    ) -> tuple[float, str, str] | None:
        """(floor ms, bound, the ceiling in words) of the declared work on this run's measured ceilings, on the GPU;
        None elsewhere or with no work declared."""
        from .ceilings import Ceilings, measure_copy_gbps, measure_matmul_tflops

        if not timer.on_gpu or not (flops or nbytes):
            return None
        import torch

        if self._ceilings is None:
            self._ceilings = Ceilings(copy_gbps=measure_copy_gbps(torch))
        if flops and flops_dtype and flops_dtype not in self._ceilings.matmul_tflops:
            self._ceilings.matmul_tflops[flops_dtype] = measure_matmul_tflops(torch, flops_dtype)
        floor = self._ceilings.floor_ms(flops, nbytes, flops_dtype)
        if floor is None:
            return None
        self.ceilings_seen[self.hardware_key] = self._ceilings.to_json()
        floor_ms, bound = floor
        if bound == "compute" and flops_dtype:
            ceiling = f"{flops_dtype} matmul {self._ceilings.matmul_tflops.get(flops_dtype, 0):.0f} TFLOP/s"
        else:
            ceiling = f"copy {self._ceilings.copy_gbps:.0f} GB/s"
        return floor_ms, bound, ceiling

    @property
    def assignment(self) -> Assignment | None:
        """The device this xdist worker times on (None outside xdist): pinned at start-up, or, when pinning is off,
        the first visible device, shared by every worker (looked up once, by the first test that uses perf)."""
        if not self._assignment_known:
            from .devices import unpinned_worker

            self._assignment, self._assignment_known = unpinned_worker(), True
        return self._assignment

    @contextlib.contextmanager
    def device_turn(self, nodeid: str = "", project: Path | None = None,
                    on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the device's lock for a whole test when xdist workers share the device; a no-op otherwise.

        A whole test, not only its timed loop: another worker's untimed kernels (its correctness check, its
        warm-up) on the same GPU would corrupt this worker's samples just as well. The lock says who holds it
        (nodeid, project); on_wait is told whom this test waits for when another run holds it for over a second.
        """
        assignment = self.assignment
        if assignment is None or not assignment.shared:
            yield
            return
        from .devices import DeviceLock, holder_record

        lock = DeviceLock(assignment.device)
        lock.acquire(holder_record(str(project or ""), nodeid), on_wait)
        try:
            yield
        finally:
            lock.release()

    def record(self, result: CompareResult) -> None:
        self.used = True
        self.records.append(result)
        self._note_fingerprint(result.hardware_key)
        self._note_call_site(result.case_id)
        if self.progress is not None:
            self.progress(result.case_id)

    def _note_call_site(self, result_id: str) -> None:
        self.call_sites[result_id] = callers_outside_speedgate()

    def _note_fingerprint(self, key: str) -> None:
        # The latest view, not the first: the timer adds what NVML cannot tell (SM count, L2) when it is made,
        # which can be after a test recorded a metric.
        fp = self.fingerprint.to_json()
        if key in self._gpu_counts:
            fp["hardware"]["gpu_count"] = self._gpu_counts[key]
        self.fingerprints[key] = fp

    # -- xdist ---------------------------------------------------------------------------------------------
    def worker_payload(self) -> str:
        return json.dumps(
            {
                "records": [r.to_json() for r in self.records],
                "metrics": [m.to_json() for m in self.metric_records],
                "failed": sorted(self.failed_nodeids),
                "passed": sorted(self.passed_nodeids),
                "passed_cases": sorted(self.passed_case_ids()),
                "test_seconds": self.test_seconds,
                "fingerprints": self.fingerprints,
                "ceilings": self.ceilings_seen,
                "gpu_state": self.gpu_state_at_start,
                "collected": {"cases": sorted(self.collected_cases), "files": sorted(self.collected_files),
                              "anchors": sorted(self.anchors), "unmarked_anchors": sorted(self.unmarked_anchors)},
                "entries_read": {key: sorted(entries) for key, entries in self.entries_read.items()},
                "cpu_contention": self._own_contention(),
                # Only when a test asked for its device: a worker that never used perf looks nothing up.
                "worker": None if self._assignment is None else {
                    "id": os.environ.get("PYTEST_XDIST_WORKER", "?"), "device": self._assignment.device,
                    "shared": self._assignment.shared, "pinned": self._assignment.pinned},
            }
        )

    def absorb(self, payload: str) -> None:
        from .results import CompareResult, MetricResult

        data = json.loads(payload)
        self.records.extend(CompareResult.from_json(r) for r in data["records"])
        self.metric_records.extend(MetricResult.from_json(m) for m in data.get("metrics", []))
        self.failed_nodeids.update(data["failed"])
        self.passed_nodeids.update(data.get("passed", []))
        self._passed_cases_absorbed.update(data.get("passed_cases", []))
        self.test_seconds.update(data.get("test_seconds", {}))
        for key, fp in data["fingerprints"].items():
            known = self.fingerprints.get(key)
            if known is None or len(fp.get("hardware", {})) > len(known.get("hardware", {})):
                self.fingerprints[key] = fp  # the fuller view, whichever worker saw it
        for key, ceilings in data.get("ceilings", {}).items():
            self.ceilings_seen.setdefault(key, ceilings)
        for key, state in data.get("gpu_state", {}).items():
            self.gpu_state_at_start.setdefault(key, state)
        if data.get("cpu_contention"):
            self._absorbed_contention.append(data["cpu_contention"])
        for key, entries in data.get("entries_read", {}).items():  # what every reader saw from the start
            mine = self.entries_read.get(key)
            self.entries_read[key] = set(entries) if mine is None else mine & set(entries)
        collected = data.get("collected", {})
        self.collected_cases.update(collected.get("cases", []))
        self.collected_files.update(collected.get("files", []))
        self.anchors.update(collected.get("anchors", []))
        self.unmarked_anchors.update(collected.get("unmarked_anchors", []))
        worker = data.get("worker")
        if worker:
            self.workers[worker["id"]] = {"device": worker["device"], "shared": worker["shared"],
                                          "pinned": worker.get("pinned", True)}
        self.used = self.used or bool(data["records"]) or bool(data.get("metrics"))

    def note_outcome(self, nodeid: str, rep: Any, perf: Any, project_root: Path) -> Path | None:
        """Record a phase's outcome of a test that used perf; keep its artifacts when it failed and they were asked
        for (returns where)."""
        self.test_seconds[nodeid] = self.test_seconds.get(nodeid, 0.0) + float(getattr(rep, "duration", 0.0) or 0.0)
        if rep.when == "call" and rep.passed:
            self._call_passed.add(nodeid)
        if rep.when == "teardown" and rep.passed and nodeid in self._call_passed:
            self.passed_nodeids.add(nodeid)  # finished: its call passed and its teardown ran to the end
        if not rep.failed:
            return None
        self.failed_nodeids.add(nodeid)
        if self.settings.artifacts_dir is None:
            return None
        from . import artifacts

        return artifacts.write(self.settings.artifacts_dir, nodeid, [r.to_json() for r in perf.results], perf.samples,
                               str(rep.longrepr), project_root)

    # -- the end of the run ---------------------------------------------------------------------------------
    @property
    def touched(self) -> bool:
        """Whether the run has anything to say: results, or workers whose results were lost."""
        return self.used or bool(self.lost_workers)

    def finished_and_passed(self, nodeid: str) -> bool:
        return nodeid in self.passed_nodeids and nodeid not in self.failed_nodeids

    def passed_case_ids(self) -> set[str]:
        """The case ids of the tests using perf that finished and passed (a worker's, merged on the controller)."""
        mine = {self.case_bases.get(n, n) for n in self.passed_nodeids - self.failed_nodeids}
        return mine | self._passed_cases_absorbed

    def unreported_entries(self, key: str) -> list[str]:
        """key's baseline entries (cases and metrics) whose test finished and passed in this run without measuring
        them: the test no longer makes that comparison or metric (renamed, removed, made only on some runs), so
        nothing gates the entry. BaselineError if the file is unusable."""
        doc = self.doc_for(key)
        if doc is None:
            return []
        passed = self.passed_case_ids()
        reported = ({r.case_id for r in self.records if r.hardware_key == key}
                    | {m.metric_id for m in self.metric_records if m.hardware_key == key})
        return [entry for entry in sorted([*doc["cases"], *doc.get("metrics", {})])
                if entry not in reported and _matches_a_case(entry, passed)]

    def blessable(self) -> tuple[dict[str, list[CompareResult]], dict[str, list[MetricResult]]]:
        """Per hardware key, the timed results and metrics of tests that finished and passed: a failed check, an
        error or an interrupted test never reaches a baseline, nor a comparison whose device's speed never settled
        (speedgate.measure's settling): that is no speed of the kernel's."""
        cases: dict[str, list[CompareResult]] = {}
        metrics: dict[str, list[MetricResult]] = {}
        for r in self.records:
            if r.timed and r.settled and self.finished_and_passed(r.nodeid):
                cases.setdefault(r.hardware_key, []).append(r)
        for m in self.metric_records:
            if self.finished_and_passed(m.nodeid):
                metrics.setdefault(m.hardware_key, []).append(m)
        return cases, metrics

    def fingerprint_for(self, key: str) -> dict[str, Any]:
        return self.fingerprints.get(key) or self.fingerprint.to_json()

    def result_keys(self) -> list[str]:
        """The hardware keys this run has results for (this machine's when it has none)."""
        keys = {r.hardware_key for r in self.records} | {m.hardware_key for m in self.metric_records}
        return sorted(keys) or [self.hardware_key]


__all__ = ["SpeedgateSession", "args_folder", "case_anchor", "case_base", "orphaned_entries"]
