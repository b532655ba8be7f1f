"""The changelog's fragments (changelog.d/<name>.<kind>.md): check them, print the next release's section, release.

    python tools/changelog.py                    # the next release's section, as the fragments make it
    python tools/changelog.py --check            # exit 1 naming every malformed fragment
    python tools/changelog.py --release 0.3.0    # write it into CHANGELOG.md under [Unreleased], remove the fragments

The format of a fragment is in changelog.d/README.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAGMENTS = ROOT / "changelog.d"
CHANGELOG = ROOT / "CHANGELOG.md"
VERSION_FILE = ROOT / "plugin" / "speedgate" / "__init__.py"
# Keep a Changelog's sections, in its order.
KINDS = {"added": "Added", "changed": "Changed", "deprecated": "Deprecated", "removed": "Removed", "fixed": "Fixed",
         "security": "Security"}
NAME = re.compile(r"^(?P<name>[a-z0-9]+(?:-[a-z0-9]+)*)\.(?P<kind>[a-z]+)\.md$")
MAX_LINE = 120
UNRELEASED = "## [Unreleased]"
# A measurement is dated by its date, GPU and card, never by whose working session it was.
SESSION = re.compile(r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|\d+(?:st|nd|rd|th))"
                     r"\s+session", re.IGNORECASE)


@dataclass(frozen=True)
class Fragment:
    """One change not released yet: its file, its section and its text."""

    path: Path
    name: str
    kind: str
    text: str

    def entry(self) -> str:
        """The text as one bullet of its section: "- " before the first line, two spaces before the others."""
        lines = self.text.strip().splitlines()
        return "\n".join([f"- {lines[0]}", *(f"  {line}" if line.strip() else "" for line in lines[1:])])


def fragment_paths(folder: Path = FRAGMENTS) -> list[Path]:
    """Every fragment file of the folder (its README is not one)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != "README.md") if folder.is_dir() else []


def problems_of(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with one fragment file, in words naming it; empty when it is well-formed."""
    where = path.name
    match = NAME.match(path.name)
    if not match:
        return [f"{where}: name it <name>.<kind>.md, <name> in lowercase words with hyphens, <kind> one of {', '.join(KINDS)}"]
    if match["kind"] not in KINDS:
        return [f"{where}: unknown kind {match['kind']!r}: one of {', '.join(KINDS)}"]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{where}: cannot be read as UTF-8 text: {exc}"]
    found = []
    if not text.strip():
        found.append(f"{where}: empty")
    lines = text.strip().splitlines()
    if lines and lines[0].startswith(("- ", "* ")):
        found.append(f"{where}: starts with a bullet; write the entry's text, the tool adds the '- '")
    for number, line in enumerate(lines, 1):
        if line.startswith("#"):
            found.append(f"{where}:{number}: a heading; the kind in the file's name chooses the section")
        if len(line) > MAX_LINE:
            found.append(f"{where}:{number}: {len(line)} characters, more than {MAX_LINE}")
    if SESSION.search(text):
        found.append(f"{where}: names a session ({SESSION.search(text)[0]!r}): name the date, GPU and card instead")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:|#", target) and not (root / target.split("#")[0]).exists():
            found.append(f"{where}: links {target}, which does not exist (links are relative to the repository's root)")
    return found


def read_fragments(folder: Path = FRAGMENTS, root: Path = ROOT) -> list[Fragment]:
    """The folder's fragments, checked; ValueError naming every problem when one is malformed."""
    paths = fragment_paths(folder)
    problems = [problem for path in paths for problem in problems_of(path, root)]
    if problems:
        raise ValueError("\n".join(problems))
    fragments = []
    for path in paths:
        match = NAME.match(path.name)
        assert match is not None  # checked above
        fragments.append(Fragment(path, match["name"], match["kind"], path.read_text(encoding="utf-8")))
    return fragments


def section(fragments: list[Fragment], heading: str) -> str:
    """A release's section: its heading, then one sub-heading per kind present, entries in name order."""
    parts = [heading]
    for kind, title in KINDS.items():
        entries = [f.entry() for f in sorted(fragments, key=lambda f: f.name) if f.kind == kind]
        if entries:
            parts.append(f"### {title}\n\n" + "\n\n".join(entries))
    return "\n\n".join(parts) + "\n"


def package_version(path: Path = VERSION_FILE) -> str:
    found = re.search(r'^__version__ = "([^"]+)"$', path.read_text(encoding="utf-8"), re.MULTILINE)
    if not found:
        raise ValueError(f"{path}: no __version__ line")
    return found[1]


def release(version: str, day: date, *, folder: Path = FRAGMENTS, changelog: Path = CHANGELOG,
            version_file: Path = VERSION_FILE, root: Path = ROOT) -> list[Path]:
    """Write the fragments into the changelog as release `version` of `day`, under [Unreleased], and remove them;
    returns the fragments removed. The package's version must already be `version`."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"{version!r} is not a version X.Y.Z")
    if package_version(version_file) != version:
        raise ValueError(f"{version_file} says __version__ = {package_version(version_file)!r}: set it to {version!r} first")
    fragments = read_fragments(folder, root)
    if not fragments:
        raise ValueError(f"{folder}: no fragment to release")
    text = changelog.read_text(encoding="utf-8")
    if f"## [{version}]" in text:
        raise ValueError(f"{changelog} already has a release {version}")
    releases = re.search(r"^## \[\d", text, re.MULTILINE)
    if UNRELEASED not in text or releases is None or text.index(UNRELEASED) > releases.start():
        raise ValueError(f"{changelog}: no '{UNRELEASED}' section above the releases")
    new = section(fragments, f"## [{version}] - {day.isoformat()}")
    changelog.write_text(text[:releases.start()] + new + "\n" + text[releases.start():], encoding="utf-8")
    for fragment in fragments:
        fragment.path.unlink()
    return [f.path for f in fragments]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/changelog.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check every fragment; exit 1 naming the malformed ones")
    parser.add_argument("--release", metavar="X.Y.Z", help="write the fragments into CHANGELOG.md as this release")
    parser.add_argument("--date", type=date.fromisoformat, default=None, help="the release's date (default: today)")
    args = parser.parse_args(argv)
    try:
        if args.release:
            removed = release(args.release, args.date or date.today())
            print(f"CHANGELOG.md: release {args.release} written from {len(removed)} fragments, which were removed")
            return 0
        fragments = read_fragments()
    except ValueError as exc:
        print(f"changelog: {exc}", file=sys.stderr)
        return 1
    if args.check:
        print(f"changelog.d: {len(fragments)} fragments, all well-formed")
        return 0
    print(section(fragments, "## [Unreleased]"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
