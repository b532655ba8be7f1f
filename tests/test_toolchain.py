"""One ptxas for a run's Triton kernels (speedgate.toolchain): Triton's key read first, then torch's ptxas set, as
torch.compile would set it, before a run's first test where the run has a test that uses perf, its binaries in a
folder of its own so that none another ptxas assembled under the same key is loaded; a project's own setting kept;
the version among the run's software, named where a kernel's facts changed, and an entry blessed before it was
recorded keeps its evidence. Fake ptxas scripts, a fake Triton backend and a fake torch stand in for the real ones: no
GPU is needed; one test compiles a real Triton kernel for a Hopper target with Triton's two ptxas."""

from __future__ import annotations

import json
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
from speedgate.toolchain import CACHE_VARIABLE, PTXAS_VARIABLE, Settled, bundled_ptxas, ptxas_version, settle_ptxas
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
    binaries = str(Path(toolchain.triton_cache_dir()) / "speedgate-ptxas-13.0.88")
    assert environ == {PTXAS_VARIABLE: str(torch_ptxas), CACHE_VARIABLE: binaries}
    assert settled == Settled(str(torch_ptxas), "13.0.88", "torch", binaries)


def test_the_binaries_go_below_the_projects_own_cache_folder_named_by_the_ptxas(packages: Path) -> None:
    tritons(packages)
    torch_ptxas = torchs(packages)
    environ = {CACHE_VARIABLE: str(packages / "ci-cache")}  # a cache a CI job keeps between runs, shared with others
    settled = settle_ptxas(90, environ, KeyReader(environ))
    assert settled is not None and environ[CACHE_VARIABLE] == settled.cache == str(packages / "ci-cache" / "speedgate-ptxas-13.0.88")
    silent = fake_ptxas(packages / "silent", "13.0.88")
    silent.write_text("#!/bin/sh\necho 'no version here'\n")  # a ptxas that says no version: named by its path
    named = toolchain.binaries_folder("/c", str(silent), None)
    assert named.parent == Path("/c") and named.name.startswith("speedgate-ptxas-") and named != toolchain.binaries_folder(
        "/c", str(torch_ptxas), None)


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
    monkeypatch.setattr("speedgate.hardware.visible_gpu_tokens", lambda: ["0"])
    monkeypatch.setattr("speedgate.hardware.compute_capability", lambda token: arch)


def test_the_bench_settles_once_and_records_the_version_among_its_software(
        packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tritons(packages)
    torch_ptxas = torchs(packages)
    monkeypatch.delenv(PTXAS_VARIABLE, raising=False)
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)  # restored (unset) after the test, as it set them
    reads: list[int] = []
    monkeypatch.setattr(toolchain, "read_triton_key_version", lambda arch: reads.append(arch) or True)
    a_gpu(monkeypatch)
    bench = Bench(None, "auto")
    bench.settle_toolchain()
    bench.settle_toolchain()
    assert reads == [90] and os.environ[PTXAS_VARIABLE] == str(torch_ptxas)
    assert os.environ[CACHE_VARIABLE].endswith("speedgate-ptxas-13.0.88")
    assert bench.software()["ptxas"] == "13.0.88"


def test_a_bench_whose_gpu_nvml_does_not_tell_settles_nothing(packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tritons(packages)
    torchs(packages)
    monkeypatch.delenv(PTXAS_VARIABLE, raising=False)
    a_gpu(monkeypatch, arch=None)
    bench = Bench(None, "auto")
    bench.settle_toolchain()
    assert PTXAS_VARIABLE not in os.environ and "ptxas" not in bench.software()


@pytest.mark.parametrize("perf_tests", ["first", "later", "none"])
def test_a_run_settles_before_its_first_test_and_its_fixtures_where_a_test_uses_perf(
        pytester: pytest.Pytester, packages: Path, monkeypatch: pytest.MonkeyPatch, perf_tests: str) -> None:
    # "later": a first test without perf compiles kernels a later test times (an edge-shape check before the timed
    # case), so it is settled too; "none": a run that never asks for perf is left as it is.
    tritons(packages)
    torch_ptxas = torchs(packages)
    monkeypatch.delenv(PTXAS_VARIABLE, raising=False)
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    monkeypatch.setattr(toolchain, "read_triton_key_version", lambda arch: True)
    a_gpu(monkeypatch)
    seen = pytester.path / "seen.txt"
    later = "\ndef test_b_later(perf):\n    pass\n" if perf_tests == "later" else ""
    pytester.makepyfile(test_seen=f"""
import os
import pytest

@pytest.fixture(scope="module")
def compiled():  # a module's fixture that would compile a kernel before the test's body
    return os.environ.get({PTXAS_VARIABLE!r}, "unset")

def test_a_first_test_sees_it({'perf, ' if perf_tests == "first" else ''}compiled):
    open({str(seen)!r}, "w").write(compiled)
{later}""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2 if later else 1)
    assert seen.read_text() == ("unset" if perf_tests == "none" else str(torch_ptxas))
    assert (CACHE_VARIABLE in os.environ) == (perf_tests != "none")


def test_a_settled_run_loads_no_binary_another_ptxas_assembled_under_the_same_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton keys a kernel with its own ptxas's version, whichever ptxas assembles it. A process that compiled a
    kernel with Triton's ptxas into the shared cache (a script, a probe, a run without speedgate), then a settled run
    of the same kernel: the settled run's binary is its own ptxas's, not the cached one. Triton's second ptxas (the
    Blackwell one it ships, another release) stands in for torch's; each compile runs in a fresh process."""
    import subprocess

    triton_ptxas = bundled_ptxas("triton")
    other = triton_ptxas.with_name("ptxas-blackwell") if triton_ptxas is not None else None
    if other is None or not other.is_file() or ptxas_version(str(other)) == ptxas_version(str(triton_ptxas)):
        pytest.skip("this Triton ships no second ptxas of another release to stand in for torch's")
    script = tmp_path / "compile.py"
    script.write_text(COMPILE_ONE_KERNEL)
    shared = tmp_path / "shared-cache"

    def compile_in_a_process(settle: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in (PTXAS_VARIABLE, "TRITON_INTERPRET")}
        env[CACHE_VARIABLE] = str(shared)
        out = subprocess.run([sys.executable, str(script), str(other) if settle else ""], env=env, text=True,
                             capture_output=True, timeout=300, check=True).stdout
        return json.loads(out.splitlines()[-1])

    plain = compile_in_a_process(settle=False)
    settled = compile_in_a_process(settle=True)
    assert settled["key"] == plain["key"]  # one key: the shared folder alone would have handed over plain's binary
    assert settled["cache"] == str(shared / f"speedgate-ptxas-{ptxas_version(str(other))}")
    assert settled["cubin"] != plain["cubin"]
    again = compile_in_a_process(settle=True)  # the settled runs' own binaries are found again
    assert again["cubin"] == settled["cubin"] and again["fresh"] == "False"


# Compiles one small kernel for an sm_90 target (no GPU needed: Triton assembles with ptxas) and prints its key, the
# cubin's hash, where speedgate put the binaries and whether it was compiled now. argv[1]: a ptxas speedgate settles
# as torch's, or "" for a process without speedgate.
COMPILE_ONE_KERNEL = """
import hashlib, json, os, sys
from pathlib import Path
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from speedgate import toolchain

cache = None
if sys.argv[1]:
    real = toolchain.bundled_ptxas
    toolchain.bundled_ptxas = lambda p: Path(sys.argv[1]) if p == "torch" else real(p)  # a torch that ships it
    cache = toolchain.settle_ptxas(90).cache

@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)

folder = Path(os.environ["TRITON_CACHE_DIR"])
before = set(folder.rglob("*.cubin")) if folder.exists() else set()
src = ASTSource(scale, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024})
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
fresh = set(folder.rglob("*.cubin")) - before
print(json.dumps({"key": kernel.hash, "cubin": hashlib.sha256(kernel.asm["cubin"]).hexdigest(), "cache": cache,
                  "fresh": str(bool(fresh))}))
"""


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
