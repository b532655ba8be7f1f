"""Staging CUTLASS's Python DSL (nvidia-cutlass-dsl, CuTe DSL) for a GPU machine that cannot reach the package index.

Usage, in the repository's root:
  python tools/stage_cutlass.py [--version 4.8.1] [--python 3.12] [--dest .cutlass] [--wheels DIR] [--with NAME]...
      downloads the wheels for CPython --python on manylinux x86_64 (pip download --no-deps), follows their
      Requires-Dist to the packages the GPU machine lacks, unpacks them into one tree (what pip install --target
      makes) and repacks that tree as DEST/cutlass-dsl-VERSION-cpXY.tar.xz (x86 BCJ + LZMA2 at preset 9e: the
      largest wheel is 92 MB, over what one GPU call can carry; the archive must stay under --max-mib) with
      DEST/MANIFEST.json (versions, wheels, the archive's SHA-256 and size). DEST is listed in the repository's
      .git/info/exclude (the main checkout's, which worktrees share), so it travels only when a call carries it.
      --wheels DIR takes the wheels from DIR instead of downloading. --with NAME stages another package and what it
      needs into the same archive (default: jsonschema, which the speedgate plugin needs to read baseline files and
      the GPU image lacks, so that one carried folder runs the suite; --only-dsl stages the DSL alone).
  python tools/stage_cutlass.py --install [--dest .cutlass] [--target /tmp/site] [--check]
      on the GPU machine: checks the archive against the manifest and this interpreter, unpacks it into TARGET and
      prints one line, `export PYTHONPATH=...` (the DSL's packages, then TARGET), for `eval`; --check imports
      cutlass and cutlass.cute in a fresh interpreter with that path first. Progress goes to stderr.

Uses the standard library only on the install side (the GPU machine has Python 3.12 and no index); the download side
needs pip.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

VERSION = "4.8.1"
GPU_PYTHON = "3.12"
DEFAULT_DEST = ".cutlass"
DEFAULT_TARGET = "/tmp/site"
MAX_MIB = 60.0  # one GPU call carries 64 MiB: the repository's own files travel beside the archive
MANIFEST = "MANIFEST.json"
STAMP = ".speedgate-unpacked"  # in the target: the SHA-256 of the archive unpacked there
ROOTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13")  # the DSL and its CUDA 13 flavour (torch cu130)
# Packages the GPU machine's image already has (the device tool's KINDS.md package list, 2026-11-17), and packages
# left out on purpose: nvidia-cutlass-dsl names the CUDA 12 flavour unconditionally; the CUDA 13 one replaces it.
PROVIDED = frozenset({"cuda-bindings", "protobuf", "typing-extensions", "numpy", "torch", "triton", "attrs"})
EXTRAS = ("jsonschema",)
SKIPPED = frozenset({"nvidia-cutlass-dsl-libs-cu12"})
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# What the unpacked tree must hold, relative to the target; the DSL's packages live under DSL_PACKAGES (the wheel's
# .pth adds that folder to sys.path, which PYTHONPATH does not do, so the printed path names it).
DSL_PACKAGES = "nvidia_cutlass_dsl/dsl_packages"
REQUIRED_FILES = (f"{DSL_PACKAGES}/cutlass/__init__.py", f"{DSL_PACKAGES}/cutlass/cute/__init__.py")
# x86 branch/call/jump filter before LZMA2: the archive is mostly x86-64 shared objects.
XZ_FILTERS = [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 192 << 20}]


class StageError(Exception):
    """A staging or install step that cannot go on; the message names the cause."""


def log(message: str) -> None:
    print(f"stage_cutlass: {message}", file=sys.stderr, flush=True)


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Requirement:
    name: str
    spec: str  # the version specifier, '' for any
    marker: str  # the environment marker, '' for none


def requirements(metadata: str) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA."""
    found = []
    for line in email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        head, _, marker = line.partition(";")
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^]]*\])?\s*\(?([^)]*)\)?\s*$", head)
        if not match:
            raise StageError(f"cannot read the requirement {line!r}")
        found.append(Requirement(normalize(match.group(1)), match.group(2).strip(), marker.strip()))
    return found


def applies(requirement: Requirement, python: str) -> bool:
    """Whether a requirement holds for a plain install (no extras) on Linux x86-64 with CPython `python`."""
    if not requirement.marker:
        return True
    if "extra" in requirement.marker:
        return False
    try:  # only the download side needs it: packaging, or the copy pip carries
        from packaging.markers import Marker
    except ImportError:
        from pip._vendor.packaging.markers import Marker  # type: ignore[no-redef]

    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    return bool(Marker(requirement.marker).evaluate(env))


def wheel_metadata(wheel: Path) -> tuple[str, str, str]:
    """(normalized name, version, METADATA text) of a wheel file."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise StageError(f"{wheel.name}: expected one *.dist-info/METADATA, found {len(names)}")
        text = zf.read(names[0]).decode()
    meta = email.parser.Parser().parsestr(text)
    return normalize(meta["Name"]), meta["Version"], text


def pip_download(specs: Sequence[str], into: Path, python: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", *(f"--platform={p}" for p in PIP_PLATFORMS), "-d", str(into), *specs]
    log("pip download " + " ".join(specs))
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise StageError(f"pip download {' '.join(specs)} failed:\n{done.stderr[-2000:]}")


def pin(requirement: Requirement) -> str:
    return requirement.name + (requirement.spec if requirement.spec else "")


def gather(wheels_dir: Path, version: str, python: str, download: bool, extras: Sequence[str] = ()) -> dict[str, Path]:
    """The wheels to stage, by name: ROOTS at `version`, the `extras` at any version, and every requirement they reach
    that the GPU machine lacks (PROVIDED) and that is not left out (SKIPPED). With download=False every one must
    already be in wheels_dir."""
    staged: dict[str, Path] = {}
    wanted = [Requirement(normalize(root), f"=={version}", "") for root in ROOTS]
    wanted += [Requirement(normalize(extra), "", "") for extra in extras]
    while wanted:
        requirement = wanted.pop(0)
        if requirement.name in staged or requirement.name in PROVIDED or requirement.name in SKIPPED:
            continue
        wheel = find_wheel(wheels_dir, requirement.name)
        if wheel is None and download:
            pip_download([pin(requirement)], wheels_dir, python)
            wheel = find_wheel(wheels_dir, requirement.name)
        if wheel is None:
            raise StageError(f"no wheel for {pin(requirement)} in {wheels_dir}")
        name, found_version, metadata = wheel_metadata(wheel)
        if requirement.spec.startswith("==") and found_version != requirement.spec[2:]:
            raise StageError(f"{wheel.name} is version {found_version}; {pin(requirement)} is needed")
        staged[name] = wheel
        wanted += [r for r in requirements(metadata) if applies(r, python)]
    return staged


def find_wheel(wheels_dir: Path, name: str) -> Path | None:
    matches = [w for w in sorted(wheels_dir.glob("*.whl")) if normalize(w.name.split("-")[0]) == name]
    if len(matches) > 1:
        raise StageError(f"two wheels of {name} in {wheels_dir}: {[m.name for m in matches]}; keep one")
    return matches[0] if matches else None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_name(version: str, python: str) -> str:
    return f"cutlass-dsl-{version}-cp{python.replace('.', '')}.tar.xz"


def repack(wheels: dict[str, Path], dest: Path, version: str, python: str, max_mib: float,
           filters: list[dict[str, int]] | None = None) -> Path:
    """Unpack the wheels into one tree and write it as one .tar.xz under dest, with the manifest beside it."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / archive_name(version, python)
    partial = archive.with_name(archive.name + ".partial")
    members = 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        for wheel in wheels.values():
            with zipfile.ZipFile(wheel) as zf:
                for member in zf.namelist():
                    check_member(member)
                zf.extractall(tree)
        log(f"compressing {sum(f.stat().st_size for f in tree.rglob('*') if f.is_file()) / 2**20:.0f} MiB "
            "into .tar.xz (at the default x86 filter and preset 9e: minutes)")
        with lzma.open(partial, "wb", format=lzma.FORMAT_XZ, filters=filters or XZ_FILTERS) as xz:
            with tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for path in sorted(tree.rglob("*")):
                    rel = path.relative_to(tree).as_posix()
                    if "__pycache__" in rel.split("/"):
                        continue
                    tar.add(path, arcname=rel, recursive=False)
                    members += path.is_file()
    size = partial.stat().st_size
    if size > max_mib * 2**20:
        partial.unlink()
        raise StageError(f"the archive is {size / 2**20:.1f} MiB, over {max_mib} MiB: it would not travel beside "
                         "the repository in one GPU call")
    os.replace(partial, archive)
    manifest = {
        "version": version, "python": python, "platform": "manylinux x86_64", "archive": archive.name,
        "sha256": sha256(archive), "bytes": size, "files": members,
        "wheels": {name: {"file": w.name, "sha256": sha256(w)} for name, w in sorted(wheels.items())},
        "pythonpath": [DSL_PACKAGES, "."], "provided_by_the_gpu_machine": sorted(PROVIDED),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    log(f"wrote {archive} ({size / 2**20:.1f} MiB, {members} files) and {dest / MANIFEST}")
    return archive


def check_member(name: str) -> None:
    """Refuse archive members that would land outside the target (absolute paths, '..')."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or name.startswith("\\"):
        raise StageError(f"refusing the archive member {name!r}: it points outside the target")


def read_manifest(dest: Path) -> dict[str, object]:
    path = dest / MANIFEST
    if not path.is_file():
        raise StageError(f"no {path}: stage first (python tools/stage_cutlass.py, in the repository's root, on a "
                         "machine that reaches the package index), then carry the folder")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StageError(f"{path} is not JSON ({exc}): stage again") from exc
    missing = {"archive", "sha256", "bytes", "python", "pythonpath"} - set(manifest)
    if missing:
        raise StageError(f"{path} lacks {sorted(missing)}: stage again")
    return manifest


def install(dest: Path, target: Path, python: str | None = None) -> str:
    """Check the staged archive and unpack it into target, unless target already holds it unpacked (STAMP); return
    the PYTHONPATH that makes cutlass importable."""
    manifest = read_manifest(dest)
    running = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != running:
        raise StageError(f"staged for CPython {manifest['python']}, this is {running}: its compiled modules would "
                         f"not import (stage with --python {running})")
    archive = dest / str(manifest["archive"])
    if not archive.is_file():
        raise StageError(f"{archive} is missing: was {dest} carried whole?")
    if archive.stat().st_size != manifest["bytes"] or sha256(archive) != manifest["sha256"]:
        raise StageError(f"{archive} does not match {dest / MANIFEST} (size or SHA-256): a partial copy? stage again")
    paths = [str((target / p).resolve()) for p in manifest["pythonpath"]]  # type: ignore[attr-defined]
    stamp = target / STAMP
    if stamp.is_file() and stamp.read_text() == manifest["sha256"] and all((target / r).is_file() for r in REQUIRED_FILES):
        # Already unpacked: unpacking again rewrites every file in place, and a process still running from this
        # tree (the device's whole-suite run, which outlives a call) died of SIGBUS in its mapped libraries.
        log(f"{archive.name} is already unpacked in {target}: left as it is")
        return os.pathsep.join(paths)
    stamp.unlink(missing_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        members = tar.getmembers()
        for member in members:
            check_member(member.name)
            if not (member.isfile() or member.isdir()):
                raise StageError(f"refusing the archive member {member.name!r}: neither a file nor a folder")
        # The 'data' filter (Python >= 3.11.4) refuses links out of the target and special files as well.
        tar.extractall(target, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    for required in REQUIRED_FILES:
        if not (target / required).is_file():
            raise StageError(f"{target / required} is missing after unpacking: the archive is not the DSL's")
    stamp.write_text(str(manifest["sha256"]))
    log(f"unpacked {len(members)} entries of {archive.name} into {target}")
    return os.pathsep.join(paths)


def check_import(pythonpath: str) -> str:
    """Import cutlass and cutlass.cute in a fresh interpreter with `pythonpath` first on sys.path (ahead of what an
    installed copy's .pth puts there); return what it printed. The copy imported must be the unpacked one."""
    paths = pythonpath.split(os.pathsep)
    code = (f"import sys; sys.path[:0] = {paths!r}; import cutlass, cutlass.cute; "
            "print('cutlass', getattr(cutlass, '__version__', '?'), cutlass.__file__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise StageError(f"import cutlass failed with PYTHONPATH={pythonpath}:\n{done.stderr[-3000:]}")
    if not done.stdout.strip().endswith(str(Path(paths[0]) / "cutlass" / "__init__.py")):
        raise StageError(f"import cutlass found another copy: {done.stdout.strip()}")
    return done.stdout.strip()


def exclude_from_git(dest: Path, root: Path) -> None:
    """List dest in the repository's info/exclude (the common one, which worktrees share), once."""
    try:
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        log(f"{root} is not a git checkout: not listing {dest.name} in info/exclude")
        return
    exclude = (root / common / "info" / "exclude").resolve()
    try:
        entry = "/" + dest.resolve().relative_to(root.resolve()).as_posix() + "/"
    except ValueError:
        return  # outside the checkout: nothing to ignore
    text = exclude.read_text() if exclude.exists() else ""
    if entry not in text.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as fh:
            fh.write(("\n" if text and not text.endswith("\n") else "") + entry + "\n")
        log(f"listed {entry} in {exclude}")


def stage(dest: Path, version: str, python: str, wheels_dir: Path | None, max_mib: float,
          extras: Sequence[str] = EXTRAS) -> Path:
    """Download (unless wheels_dir holds them) and repack."""
    if wheels_dir is not None:
        return repack(gather(wheels_dir, version, python, False, extras), dest, version, python, max_mib)
    with tempfile.TemporaryDirectory() as tmp:
        return repack(gather(Path(tmp), version, python, True, extras), dest, version, python, max_mib)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="unpack the staged archive (on the GPU machine)")
    parser.add_argument("--dest", default=DEFAULT_DEST, help=f"the staging folder (default: {DEFAULT_DEST})")
    parser.add_argument("--target", default=DEFAULT_TARGET, help=f"--install: where to unpack (default: {DEFAULT_TARGET})")
    parser.add_argument("--check", action="store_true", help="--install: import cutlass and cutlass.cute afterwards")
    parser.add_argument("--version", default=VERSION, help=f"nvidia-cutlass-dsl version (default: {VERSION})")
    parser.add_argument("--python", default=GPU_PYTHON, help=f"CPython version to stage for (default: {GPU_PYTHON})")
    parser.add_argument("--wheels", type=Path, help="take the wheels from this folder instead of downloading")
    parser.add_argument("--max-mib", type=float, default=MAX_MIB, help=f"largest archive allowed (default: {MAX_MIB})")
    parser.add_argument("--with", dest="extras", action="append", metavar="NAME",
                        help=f"stage this package too, with what it needs (default: {', '.join(EXTRAS)})")
    parser.add_argument("--only-dsl", action="store_true", help="stage the DSL alone, no --with packages")
    args = parser.parse_args(list(argv) if argv is not None else None)
    dest = Path(args.dest)
    try:
        if args.install:
            pythonpath = install(dest, Path(args.target))
            if args.check:
                log(check_import(pythonpath))
            print(f"export PYTHONPATH={pythonpath}${{PYTHONPATH:+:$PYTHONPATH}}")
        else:
            exclude_from_git(dest, Path.cwd())
            extras = () if args.only_dsl else tuple(args.extras or EXTRAS)
            stage(dest, args.version, args.python, args.wheels, args.max_mib, extras)
    except StageError as exc:
        log(f"error: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
