"""The changelog: released sections, then fragments in changelog.d/ (tools/changelog.py) that never grow one block;
and every page, the changelog and the code date a measurement by its date, GPU and card, never by a session."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest

from tools import changelog

ROOT = Path(__file__).resolve().parents[1]


def test_every_fragment_is_well_formed() -> None:
    fragments = changelog.read_fragments()  # raises naming every malformed one
    assert all(f.kind in changelog.KINDS for f in fragments)


def test_the_changelog_is_releases_under_an_unreleased_pointer() -> None:
    text = changelog.CHANGELOG.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.*)$", text, re.MULTILINE)
    assert headings[0] == "[Unreleased]", headings[:2]
    releases = headings[1:]
    assert releases and all(re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", h) for h in releases), releases
    days = [h.rsplit(" ", 1)[1] for h in releases]
    assert days == sorted(days, reverse=True), "releases newest first"
    # Unreleased changes are fragments: the section itself holds no entry and no sub-heading.
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    assert not re.search(r"^(- |### )", unreleased, re.MULTILINE), (
        "CHANGELOG.md's [Unreleased] section has entries: write each as a fragment in changelog.d/ (changelog.d/README.md)")
    for release in re.split(r"^## \[\d", text, flags=re.MULTILINE)[1:]:
        kinds = re.findall(r"^### (.*)$", release, re.MULTILINE)
        assert kinds and set(kinds) <= set(changelog.KINDS.values()), kinds


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("thing.added.txt", "x\n", "name it <name>.<kind>.md"),
    ("Thing.added.md", "x\n", "name it <name>.<kind>.md"),
    ("thing.improved.md", "x\n", "unknown kind 'improved'"),
    ("thing.fixed.md", "  \n", "empty"),
    ("thing.fixed.md", "- A bullet.\n", "starts with a bullet"),
    ("thing.fixed.md", "Text.\n### Fixed\n", "a heading"),
    ("thing.fixed.md", "x" * 121 + "\n", "121 characters"),
    ("thing.fixed.md", "Measured in the fifth session.\n", "names a session ('fifth session')"),
    ("thing.fixed.md", "See [the page](docs/nowhere.md).\n", "links docs/nowhere.md, which does not exist"),
])
def test_a_malformed_fragment_is_named_with_its_problem(tmp_path: Path, name: str, text: str, problem: str) -> None:
    write(tmp_path, name, text)
    with pytest.raises(ValueError, match=re.escape(problem)):
        changelog.read_fragments(tmp_path)


def test_a_release_writes_its_section_under_unreleased_and_removes_the_fragments(tmp_path: Path) -> None:
    folder = tmp_path / "changelog.d"
    folder.mkdir()
    write(folder, "README.md", "how to write one\n")
    write(folder, "zeta.fixed.md", "Zeta fixed,\nover two lines.\n")
    write(folder, "alpha.fixed.md", "Alpha fixed.\n")
    write(folder, "new-thing.added.md", "A new thing ([the page](docs/index.md)).\n")
    log = write(tmp_path, "CHANGELOG.md", "# Changelog\n\nIntro.\n\n## [Unreleased]\n\nFragments.\n\n"
                                          "## [0.2.0] - 2026-11-26\n\n### Added\n\n- Old.\n")
    version = write(tmp_path, "__init__.py", '__version__ = "0.3.0"\n')
    removed = changelog.release("0.3.0", date(2026, 12, 1), folder=folder, changelog=log, version_file=version, root=ROOT)
    assert sorted(p.name for p in removed) == ["alpha.fixed.md", "new-thing.added.md", "zeta.fixed.md"]
    assert [p.name for p in folder.iterdir()] == ["README.md"]
    assert log.read_text() == (
        "# Changelog\n\nIntro.\n\n## [Unreleased]\n\nFragments.\n\n"
        "## [0.3.0] - 2026-12-01\n\n### Added\n\n- A new thing ([the page](docs/index.md)).\n\n"
        "### Fixed\n\n- Alpha fixed.\n\n- Zeta fixed,\n  over two lines.\n\n"
        "## [0.2.0] - 2026-11-26\n\n### Added\n\n- Old.\n")


def test_a_release_needs_the_packages_version_first(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    write(tmp_path / "d", "a.added.md", "A.\n")
    log = write(tmp_path, "CHANGELOG.md", "## [Unreleased]\n\n## [0.2.0] - 2026-11-26\n")
    version = write(tmp_path, "__init__.py", '__version__ = "0.2.0"\n')
    with pytest.raises(ValueError, match="set it to '0.3.0' first"):
        changelog.release("0.3.0", date(2026, 12, 1), folder=tmp_path / "d", changelog=log, version_file=version)
    assert (tmp_path / "d" / "a.added.md").exists()


# Where a measurement could be dated: the pages, the changelog and its fragments, the code and its comments.
DATED = ["README.md", "CHANGELOG.md", "changelog.d", "docs", "plugin", "perftests", "tools", "tests", ".ci", ".github"]
SUFFIXES = {".md", ".py", ".sh", ".toml", ".ini", ".yml", ".txt", ""}


def test_no_page_changelog_or_module_names_a_session() -> None:
    """A reader who was not there cannot place "the fifth session": every measurement names its date, GPU and card.
    (lab/ is not read here: three of its comments still cite docs/NOTES.md by session, which that page maps to dates.)"""
    found = []
    for top in DATED:
        base = ROOT / top
        for path in ([base] if base.is_file() else sorted(base.rglob("*"))):
            if not path.is_file() or path.suffix not in SUFFIXES or "__pycache__" in path.parts or path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if changelog.SESSION.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "name the date, GPU and card instead of a session:\n" + "\n".join(found)
