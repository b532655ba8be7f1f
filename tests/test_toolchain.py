"""One ptxas for a run's Triton kernels (speedgate.toolchain): Triton's key read first, then torch's ptxas set, as
torch.compile would set it, before a run's first test that uses perf; a project's own setting kept; the version among
the run's software, named where a kernel's facts changed, and an entry blessed before it was recorded keeps its
evidence. Fake ptxas scripts, a fake Triton backend and a fake torch stand in for the real ones: no GPU is needed."""

from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from speedgate import toolchain
from speedgate.bench import Bench
from speedgate.blessing import bless
from speedgate.toolchain import PTXAS_VARIABLE, Settled, bundled_ptxas, ptxas_version, settle_ptxas
from speedgate.verdict import Verdict


def fake_ptxas(folder: Path, version: str = "13.0.88", executable: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ptxas"
    release = version.rsplit(".", 1)[0]
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{version}'\n")
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake torch and triton package folders, found by toolchain in place of the installed ones (none imported)."""
    from importlib.machinery import ModuleSpec

    def find_spec(name: str) -> ModuleSpec | None:
        if name not in ("torch", "triton"):
            return None
        spec = ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(tmp_path / name)]
        return spec

    monkeypatch.setattr(toolchain.importlib.util, "find_spec", find_spec)
    return tmp_path


def tritons(packages: Path, version: str = "12.8.93") -> Path:
    return fake_ptxas(packages / "triton" / "backends" / "nvidia" / "bin", version)


def torchs(packages: Path, version: str = "13.0.88") -> Path:
    return fake_ptxas(packages / "torch" / "bin", version)


class KeyReader:
    """Triton's key read, recorded with what the variable said at that moment."""

    def __init__(self, environ: dict[str, str], works: bool = True) -> None:
        self.environ, self.works, self.calls = environ, works, []  # type: ignore[var-annotated]

    def __call__(self, arch: int) -> bool:
        self.calls.append((arch, self.environ.get(PTXAS_VARIABLE)))
        return self.works


def test_tritons_key_is_read_first_then_torchs_ptxas_is_set(packages: Path) -> None:
    tritons(packages)
    torch_ptxas = torchs(packages)
    environ: dict[str, str] = {}
    reader = KeyReader(environ)
    settled = settle_ptxas(90, environ, reader)
    assert reader.calls == [(90, None)]  # the key's version read with the variable unset: Triton's own ptxas
    assert environ == {PTXAS_VARIABLE: str(torch_ptxas)}
    assert settled == Settled(str(torch_ptxas), "13.0.88", "torch")


def test_a_projects_own_ptxas_is_kept_and_named(packages: Path) -> None:
    torchs(packages)
    own = fake_ptxas(packages / "own", "12.9.86")
    environ = {PTXAS_VARIABLE: str(own)}
    reader = KeyReader(environ)
    assert settle_ptxas(90, environ, reader) == Settled(str(own), "12.9.86", "project")
    assert environ == {PTXAS_VARIABLE: str(own)} and reader.calls == []


def test_nothing_is_changed_where_the_key_cannot_be_read_first(packages: Path) -> None:
    # Another Triton keys its kernels some other way: setting the variable could change every key under the held picks.
    tritons(packages)
    torchs(packages)
    environ: dict[str, str] = {}
    assert settle_ptxas(90, environ, KeyReader(environ, works=False)) is None and environ == {}


def test_without_torchs_ptxas_tritons_own_assembles_and_nothing_is_set(packages: Path) -> None:
    triton_ptxas = tritons(packages)
    fake_ptxas(packages / "torch" / "bin", executable=False)  # there, but not one that can run
    environ: dict[str, str] = {}
    reader = KeyReader(environ)
    assert settle_ptxas(90, environ, reader) == Settled(str(triton_ptxas), "12.8.93", "triton")
    assert environ == {} and reader.calls == []


def test_without_a_gpu_nothing_is_settled(packages: Path) -> None:
    tritons(packages)
    torchs(packages)
    environ: dict[str, str] = {}
    assert settle_ptxas(None, environ, KeyReader(environ)) is None and environ == {}
    assert bundled_ptxas("torch") is not None  # there: the GPU's absence alone decided


def test_the_version_is_read_from_ptxas_itself(packages: Path) -> None:
    assert ptxas_version(str(fake_ptxas(packages / "a", "12.8.93"))) == "12.8.93"
    assert ptxas_version(str(packages / "missing")) is None
    odd = packages / "odd" / "ptxas"
    odd.parent.mkdir()
    odd.write_text("#!/bin/sh\necho 'no version here'\n")
    odd.chmod(0o755)
    assert ptxas_version(str(odd)) is None


def test_tritons_key_is_read_through_its_backend_as_its_hash_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    compiler = types.ModuleType("triton.backends.nvidia.compiler")
    compiler.get_ptxas_version = lambda *args, **kwargs: calls.append((args, kwargs))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.compiler", compiler)
    assert toolchain.read_triton_key_version(90) and calls == [((90,), {})]  # positional: the cache's own key
    del compiler.get_ptxas_version  # type: ignore[attr-defined]
    assert not toolchain.read_triton_key_version(90)

    def broken(arch: int) -> None:
        raise FileNotFoundError("ptxas")

    compiler.get_ptxas_version = broken  # type: ignore[attr-defined]
    assert not toolchain.read_triton_key_version(90)


def a_gpu(monkeypatch: pytest.MonkeyPatch, arch: int | None = 90) -> None:
    """NVML's view for the bench: one visible GPU of this target (None: NVML gives none)."""
    monkeypatch.setattr("speedgate.bench.visible_gpu_tokens", lambda: ["0"])
    monkeypatch.setattr("speedgate.bench.compute_capability", lambda token: arch)


def test_the_bench_settles_once_and_records_the_version_among_its_software(
        packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tritons(packages)
    torch_ptxas = torchs(packages)
    monkeypatch.delenv(PTXAS_VARIABLE, raising=False)
    reads: list[int] = []
    monkeypatch.setattr(toolchain, "read_triton_key_version", lambda arch: reads.append(arch) or True)
    a_gpu(monkeypatch)
    bench = Bench(None, "auto")
    bench.settle_toolchain()
    bench.settle_toolchain()
    assert reads == [90] and os.environ[PTXAS_VARIABLE] == str(torch_ptxas)
    assert bench.software()["ptxas"] == "13.0.88"
    os.environ.pop(PTXAS_VARIABLE)


def test_a_bench_whose_gpu_nvml_does_not_tell_settles_nothing(packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tritons(packages)
    torchs(packages)
    monkeypatch.delenv(PTXAS_VARIABLE, raising=False)
    a_gpu(monkeypatch, arch=None)
    bench = Bench(None, "auto")
    bench.settle_toolchain()
    assert PTXAS_VARIABLE not in os.environ and "ptxas" not in bench.software()


@pytest.mark.parametrize("uses_perf", [True, False])
def test_a_run_settles_before_its_first_test_that_uses_perf_and_its_fixtures(
        pytester: pytest.Pytester, packages: Path, monkeypatch: pytest.MonkeyPatch, uses_perf: bool) -> None:
    tritons(packages)
    torch_ptxas = torchs(packages)
    monkeypatch.delenv(PTXAS_VARIABLE, raising=False)
    monkeypatch.setattr(toolchain, "read_triton_key_version", lambda arch: True)
    a_gpu(monkeypatch)
    seen = pytester.path / "seen.txt"
    pytester.makepyfile(test_seen=f"""
import os
import pytest

@pytest.fixture(scope="module")
def compiled():  # a module's fixture that would compile a kernel before the test's body
    return os.environ.get({PTXAS_VARIABLE!r}, "unset")

def test_a_first_test_sees_it({'perf, ' if uses_perf else ''}compiled):
    open({str(seen)!r}, "w").write(compiled)
""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert seen.read_text() == (str(torch_ptxas) if uses_perf else "unset")
    os.environ.pop(PTXAS_VARIABLE, None)  # monkeypatch restores what it saw; the run set it


def test_an_entry_blessed_before_the_ptxas_was_recorded_keeps_its_evidence_when_blessed_again() -> None:
    from tests.test_calibration import FREE, compare_result

    def run(existing: dict[str, Any] | None, speedup: float, software: dict[str, Any]) -> dict[str, Any]:
        r = compare_result(speedup, calibration_runs=3, calibration_spread=0.005)
        doc, _ = bless(existing, hardware_key="test-box", fingerprint={"hardware": {}, "software": software},
                       cases=[r], metrics=[], measured_at="now")
        return doc

    doc = run(None, 0.95, {"torch": "2.11.0", "triton": "3.6.0"})
    doc = run(doc, 0.93, {"torch": "2.11.0", "triton": "3.6.0", "ptxas": "13.0.88"})
    assert doc["cases"][FREE]["calibration"]["process_speedups"] == [0.95, 0.93]
    assert doc["cases"][FREE]["software"]["ptxas"] == "13.0.88"
    # Once recorded, another ptxas is other software: its evidence starts again.
    doc = run(doc, 0.90, {"torch": "2.11.0", "triton": "3.6.0", "ptxas": "12.8.93"})
    assert doc["cases"][FREE]["calibration"]["process_speedups"] == [0.90]


def test_a_kernel_whose_facts_changed_with_the_ptxas_names_it_and_is_no_pick() -> None:
    from tests.test_blind_cases import ENTRY, judged, measured, sides

    software = dict(ENTRY["software"])
    entry = {**ENTRY, "software": {**software, "ptxas": "13.0.88"},
             "codegen": sides([{"name": "_k"}], reference=[{"name": "_attn_fwd", "registers": 138}])}
    now = sides([{"name": "_k"}], reference=[{"name": "_attn_fwd", "registers": 148}])
    result, _ = judged(measured(2.0), entry=entry, codegen_now=now, software={**software, "ptxas": "12.8.93"})
    assert result.verdict == Verdict.PASS and result.codegen_drift
    assert "codegen changed since the bless after ptxas 13.0.88 -> 12.8.93" in result.note


def test_the_gpus_target_is_asked_of_nvml_not_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from speedgate.hardware import compute_capability

    class NVMLError(Exception):
        pass

    asked: list[object] = []
    pynvml = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: asked.append("shut"),
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(i) or f"handle{i}",
        nvmlDeviceGetHandleByUUID=lambda u: asked.append(u) or u,
        nvmlDeviceGetCudaComputeCapability=lambda handle: (9, 0) if handle == "handle1" else (8, 0))
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    assert compute_capability("1") == 90 and asked == [1, "shut"]
    assert compute_capability("GPU-abc") == 80
    assert compute_capability("nonsense") is None  # a token NVML cannot map: nothing to settle by

    def no_driver() -> None:
        raise NVMLError("no driver")

    pynvml.nvmlInit = no_driver
    assert compute_capability("0") is None


def test_a_kernel_whose_entry_predates_the_recorded_ptxas_says_so() -> None:
    from tests.test_blind_cases import ENTRY, judged, measured, sides

    entry = {**ENTRY, "codegen": sides([{"name": "_k", "registers": 88}])}  # blessed before the ptxas was recorded
    now = sides([{"name": "_k", "registers": 87}])
    result, _ = judged(measured(2.0), entry=entry, codegen_now=now, software={**ENTRY["software"], "ptxas": "13.0.88"})
    assert result.verdict == Verdict.PASS and not result.codegen_drift
    assert ("codegen changed since the bless: optimized _k: registers 88 -> 87 (the entry does not say which ptxas "
            "(13.0.88 in this run) made its kernels: blessed before speedgate recorded it; a re-bless records it)"
            ) in result.note
    recorded = {**entry, "software": {**ENTRY["software"], "ptxas": "13.0.88"}}
    result, _ = judged(measured(2.0), entry=recorded, codegen_now=now, software={**ENTRY["software"], "ptxas": "13.0.88"})
    assert "does not say which" not in result.note


def test_tritons_cuobjdump_is_found_where_its_ptxas_is(packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # codegen reads a cubin's registers with the cuobjdump Triton ships, found the way its ptxas is (one helper).
    import shutil

    from speedgate import codegen

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/cuda/bin/{name}")
    assert codegen._cuobjdump() == "/usr/local/cuda/bin/cuobjdump"  # none shipped: the one on PATH
    tool = fake_ptxas(packages / "triton" / "backends" / "nvidia" / "bin")
    bundled = tool.with_name("cuobjdump")
    tool.rename(bundled)
    assert codegen._cuobjdump() == str(bundled)
    assert toolchain.bundled_tool("triton", "cuobjdump") == bundled and toolchain.bundled_ptxas("triton") is None
