"""tools/stage_cutlass.py on small fake wheels (CI downloads nothing): which wheels it stages from their Requires-Dist,
the archive and manifest it writes, and the install side's checks (interpreter, size and SHA-256, paths) before it
unpacks anything, then an import of the unpacked `cutlass` and `cutlass.cute` on the PYTHONPATH it prints."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tools import stage_cutlass as stage

VERSION = "9.9.1"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
FAST = [{"id": lzma.FILTER_LZMA2, "preset": 0}]  # the tests' archives: seconds, not minutes


def wheel(folder: Path, name: str, version: str, requires: list[str], files: dict[str, str | bytes]) -> Path:
    """A wheel file with METADATA (Name, Version, Requires-Dist) and the given files."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}/METADATA", metadata)
        for member, text in files.items():
            zf.writestr(member, text)
    return path


def fake_dsl(folder: Path, version: str = VERSION) -> Path:
    """The DSL's wheels as 4.8.1 lays them out: the meta package (its .pth, and Requires-Dist naming the CUDA 12
    flavour, the CUDA 13 one as an extra), the base and core libraries, the CUDA 13 flavour, and one extra package."""
    folder.mkdir(exist_ok=True)
    packages = "nvidia_cutlass_dsl/dsl_packages"
    wheel(folder, "nvidia-cutlass-dsl", version,
          [f"nvidia-cutlass-dsl-libs-base=={version}", f"nvidia-cutlass-dsl-libs-cu12=={version}",
           f'nvidia-cutlass-dsl-libs-cu13=={version}; extra == "cu13"'],
          {"nvidia_cutlass_dsl_packages.pth": "import sys\n"})
    wheel(folder, "nvidia-cutlass-dsl-libs-base", version,
          ["typing-extensions>=4.10.0", "cuda-bindings>=12.8", 'backports.strenum; python_version < "3.11"',
           "protobuf>=4.21.12", f"nvidia-cutlass-dsl-libs-core=={version}",
           'nvidia-cuda-nvdisasm<14,>=13.4.0rc1; extra == "sass"'],
          {"nvidia_cutlass_dsl/__init__.py": "", f"{packages}/cutlass/_base.py": "BASE = True\n"})
    wheel(folder, "nvidia-cutlass-dsl-libs-core", version, ["cuda-bindings>=12.8"],
          {f"{packages}/cutlass/__init__.py": f"__version__ = {version!r}\n", f"{packages}/cutlass/cute/__init__.py": "CUTE = 1\n"})
    wheel(folder, "nvidia-cutlass-dsl-libs-cu13", version, [f"nvidia-cutlass-dsl-libs-base=={version}"],
          {"nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so": "not really a shared object\n"})
    wheel(folder, "jsonschema", "4.0.0", ["attrs>=22.2.0", "referencing>=0.28.4"], {"jsonschema/__init__.py": ""})
    wheel(folder, "referencing", "0.30.0", ["attrs>=22.2.0"], {"referencing/__init__.py": ""})
    return folder


def staged(tmp_path: Path, python: str = PY, extras: tuple[str, ...] = ("jsonschema",)) -> Path:
    wheels = fake_dsl(tmp_path / "wheels")
    dest = tmp_path / "stage"
    stage.repack(stage.gather(wheels, VERSION, python, False, extras), dest, VERSION, python, 1.0, FAST)
    return dest


def excinfo_of(fn: Callable[[], object]) -> BaseException:
    """The StageError fn raises (failing the test if it raises none)."""
    with pytest.raises(stage.StageError) as excinfo:
        fn()
    return excinfo.value


def test_gather_follows_requires_dist_to_what_the_gpu_machine_lacks(tmp_path: Path) -> None:
    wheels = fake_dsl(tmp_path / "wheels")
    found = stage.gather(wheels, VERSION, "3.12", download=False, extras=("jsonschema",))
    # Not the CUDA 12 flavour (left out), not cuda-bindings/protobuf/typing-extensions/attrs (the GPU machine has
    # them), not extras' packages (nvdisasm), not backports.strenum (Python < 3.11 only).
    assert sorted(found) == ["jsonschema", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base",
                             "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-cu13", "referencing"]
    assert "backports-strenum" in str(excinfo_of(lambda: stage.gather(wheels, VERSION, "3.10", download=False)))


def test_gather_names_a_missing_or_mismatched_wheel(tmp_path: Path) -> None:
    wheels = fake_dsl(tmp_path / "wheels")
    (wheels / f"nvidia_cutlass_dsl_libs_core-{VERSION}-py3-none-any.whl").unlink()
    assert "no wheel for nvidia-cutlass-dsl-libs-core==9.9.1" in str(excinfo_of(lambda: stage.gather(wheels, VERSION, "3.12", False)))
    other = fake_dsl(tmp_path / "other", version="9.9.0")
    wheel(other, "nvidia-cutlass-dsl", VERSION, [f"nvidia-cutlass-dsl-libs-base=={VERSION}"], {})
    (other / "nvidia_cutlass_dsl-9.9.0-py3-none-any.whl").unlink()
    message = str(excinfo_of(lambda: stage.gather(other, VERSION, "3.12", False)))
    assert "-9.9.0-py3-none-any.whl is version 9.9.0; nvidia-cutlass-dsl-libs-" in message and "==9.9.1 is needed" in message
    twice = fake_dsl(tmp_path / "twice")
    wheel(twice, "nvidia-cutlass-dsl-libs-base", "9.9.2", [], {})
    assert "two wheels of nvidia-cutlass-dsl-libs-base" in str(excinfo_of(lambda: stage.gather(twice, VERSION, "3.12", False)))


def test_requirements_and_markers() -> None:
    parsed = stage.requirements('Name: x\nRequires-Dist: nvidia-cuda-nvdisasm<14,>=13.4.0rc1; extra == "sass"\n'
                                "Requires-Dist: Typing_Extensions (>=4.10.0)\nRequires-Dist: pkg[extra1]==1.0\n")
    assert parsed == [stage.Requirement("nvidia-cuda-nvdisasm", "<14,>=13.4.0rc1", 'extra == "sass"'),
                      stage.Requirement("typing-extensions", ">=4.10.0", ""), stage.Requirement("pkg", "==1.0", "")]
    assert not stage.applies(parsed[0], "3.12") and stage.applies(parsed[1], "3.12")
    old_python = stage.Requirement("backports-strenum", "", 'python_version < "3.11"')
    assert stage.applies(old_python, "3.10") and not stage.applies(old_python, "3.12")


def test_repack_then_install_imports_cutlass(tmp_path: Path) -> None:
    dest = staged(tmp_path)
    manifest = json.loads((dest / stage.MANIFEST).read_text())
    archive = dest / stage.archive_name(VERSION, PY)
    assert manifest["archive"] == archive.name and manifest["bytes"] == archive.stat().st_size
    assert manifest["sha256"] == stage.sha256(archive) and manifest["python"] == PY
    assert sorted(manifest["wheels"]) == ["jsonschema", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base",
                                          "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-cu13", "referencing"]
    target = tmp_path / "site"
    pythonpath = stage.install(dest, target)
    assert pythonpath.split(":") == [str((target / "nvidia_cutlass_dsl/dsl_packages").resolve()), str(target.resolve())]
    assert (target / "nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so").is_file()
    assert (target / "jsonschema/__init__.py").is_file() and (target / "nvidia_cutlass_dsl_packages.pth").is_file()
    assert stage.check_import(pythonpath) == f"cutlass {VERSION} {(target / 'nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py').resolve()}"


def test_a_second_install_leaves_the_unpacked_files_alone(tmp_path: Path) -> None:
    """Unpacking again rewrote every file in place: the device's whole-suite run, still running from the tree when
    the next call installed, died of SIGBUS in a mapped library. Another archive is unpacked afresh."""
    dest = staged(tmp_path)
    target = tmp_path / "site"
    first = stage.install(dest, target)
    library = target / "nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so"
    unpacked = library.read_bytes()
    library.write_bytes(b"marked after the first install")  # a rewrite would put the archive's bytes back
    assert stage.install(dest, target) == first
    assert library.read_bytes() == b"marked after the first install"
    (target / stage.STAMP).write_text("the digest of another archive")
    assert stage.install(dest, target) == first
    assert library.read_bytes() == unpacked
    assert (target / stage.STAMP).read_text() == json.loads((dest / stage.MANIFEST).read_text())["sha256"]


def test_install_refuses_before_unpacking(tmp_path: Path) -> None:
    """A partial or corrupted archive, another interpreter, or no manifest: an error naming the cause, and the
    target left as it was."""
    dest = staged(tmp_path)
    target = tmp_path / "site"
    archive = dest / stage.archive_name(VERSION, PY)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    assert "does not match" in str(excinfo_of(lambda: stage.install(dest, target)))
    archive.write_bytes(bytes(data[:-100]))
    assert "does not match" in str(excinfo_of(lambda: stage.install(dest, target)))
    archive.unlink()
    assert "is missing: was" in str(excinfo_of(lambda: stage.install(dest, target)))
    assert not target.exists()
    (dest / stage.MANIFEST).write_text("{not json")
    assert "is not JSON" in str(excinfo_of(lambda: stage.install(dest, target)))
    (dest / stage.MANIFEST).unlink()
    assert "stage first" in str(excinfo_of(lambda: stage.install(dest, target)))


def test_install_refuses_another_interpreters_archive(tmp_path: Path) -> None:
    dest = staged(tmp_path, python="3.99")
    message = str(excinfo_of(lambda: stage.install(dest, tmp_path / "site")))
    assert f"staged for CPython 3.99, this is {PY}" in message and not (tmp_path / "site").exists()


def test_repack_refuses_paths_out_of_the_target_and_oversized_archives(tmp_path: Path) -> None:
    wheels = fake_dsl(tmp_path / "wheels")
    found = stage.gather(wheels, VERSION, PY, False)
    dest = tmp_path / "stage"
    stage.repack(found, dest, VERSION, PY, 1.0, FAST)
    before = (dest / stage.archive_name(VERSION, PY)).read_bytes()
    evil = wheel(tmp_path, "evil", "1.0", [], {"../outside.py": "x = 1\n"})
    assert "points outside the target" in str(excinfo_of(lambda: stage.repack({**found, "evil": evil}, dest, VERSION, PY, 1.0, FAST)))
    big = wheel(tmp_path, "big", "1.0", [], {"big/blob.bin": os.urandom(1 << 20)})  # incompressible
    assert "over 0.5 MiB" in str(excinfo_of(lambda: stage.repack({**found, "big": big}, dest, VERSION, PY, 0.5, FAST)))
    # Neither refusal touched what was staged before.
    assert (dest / stage.archive_name(VERSION, PY)).read_bytes() == before
    assert not list(dest.glob("*.partial"))


def test_exclude_from_git_lists_the_folder_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    exclude = repo / ".git" / "info" / "exclude"
    exclude.write_text("/.whl/")  # no newline at the end
    for _ in range(2):
        stage.exclude_from_git(repo / ".cutlass", repo)
    assert exclude.read_text() == "/.whl/\n/.cutlass/\n"
    (repo / ".cutlass").mkdir()
    (repo / ".cutlass" / "MANIFEST.json").write_text("{}")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True, text=True, check=True)
    assert ".cutlass" not in status.stdout


def test_command_line_install_prints_the_export_line(tmp_path: Path) -> None:
    dest = staged(tmp_path)
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, str(Path(stage.__file__)), "--install", "--dest", str(dest), "--target", str(target),
                           "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [f"export PYTHONPATH={stage.install(dest, target)}${{PYTHONPATH:+:$PYTHONPATH}}"]
    assert f"cutlass {VERSION}" in done.stderr
    missing = subprocess.run([sys.executable, str(Path(stage.__file__)), "--install", "--dest", str(tmp_path / "none")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stdout == "" and "stage first" in missing.stderr


def test_ci_installs_the_dsl_version_the_gpu_machine_is_staged():
    """The DSL's trace-time checks run in CI only (perftests/test_cutlass_matmul.py skips them on the GPU): CI's pin
    must be the version staged for the GPU machine, or CI checks another DSL's layouts than the timed kernels'."""
    tox = (Path(__file__).resolve().parents[1] / "tox.ini").read_text()
    pins = [line.strip() for line in tox.splitlines() if line.strip().startswith("nvidia-cutlass-dsl")]
    assert pins == [f"nvidia-cutlass-dsl=={stage.VERSION}"], pins
