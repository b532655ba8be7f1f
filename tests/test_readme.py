"""README.md and the reference pages beside it (docs/*.md) run as written: their Python blocks as test files of a fresh
project, their shell blocks in this repository, and every option, ini key, environment variable, path and link they
name exists. The README stays a reference: short, no dated measurement, no count that goes stale, and no example
pytest.ini that quietly replaces the CPU's default tolerance.

How a fenced block is taken, from the HTML comment on the line before its fence (if any):
- ```python: a test file of a fresh pytester project, run with --correctness-only on the CPU (no GPU visible,
  Triton's interpreter on); it must pass, with at least one test run and none skipped.
- ```bash: run with bash in this repository's root; it must exit 0.
- ```ini: preceded by `<!-- pytest.ini of the next python block -->`, that block's project's pytest.ini.
- `<!-- not run: REASON -->` before any of these: not run; the reason is required, and the block's test is
  reported as skipped with it (so `-rs` lists and counts them).
- Other fences (```text, ```console, ...) are output or fragments and are not run; a fence without a language is
  refused, so that every block says what it is.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from speedgate.options import DEFAULT_CPU_TOLERANCE

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The reference pages: the README and the pages beside docs/index.md. The pages under docs/results/ are records of
# measurements (paths in them are as they were then) and are not run.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Pages that only point to measurements, by date and machine; every other reference page names no date.
POINTER_PAGES = {"docs/index.md", "docs/NOTES.md"}
LAYOUT = ROOT / "docs" / "layout.md"
README_MAX_LINES = 400
RUN_LANGUAGES = ("python", "bash", "ini")
NOT_RUN = re.compile(r"not run: (?P<reason>\S.*)")
INI_FOR_NEXT = "pytest.ini of the next python block"
# A fresh interpreter importing torch and triton, on a shared 2-core box: generous.
SUBPROCESS_TIMEOUT_S = 300
# Long options of other tools that the README quotes after the tool's name (checked to appear so).
OTHER_TOOLS = {"--stat": "git diff --stat", "--strict": "twine check --strict",
               "--system-site-packages": "python3 -m venv --system-site-packages"}


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    marker: str  # the HTML comment on the line before the fence, without <!-- -->; "" when none
    page: str = "README.md"

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def run(self) -> bool:
        return not NOT_RUN.fullmatch(self.marker)


def fenced_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of a Markdown text, with the comment that marks it."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        if i == len(lines):
            raise AssertionError(f"{page}:{start + 1}: a fence that is never closed")
        previous = lines[start - 1].strip() if start > 0 else ""
        comment = re.fullmatch(r"<!--\s*(.*?)\s*-->", previous)
        blocks.append(Block(fence.group(1), "\n".join(lines[start + 1:i]) + "\n", start + 1, comment.group(1) if comment else "",
                            page))
        i += 1
    return blocks


BLOCKS = [b for page in PAGES for b in fenced_blocks(page.read_text(), name(page))]
TEXT = "\n".join(page.read_text() for page in PAGES)


def of(language: str) -> list[Block]:
    return [b for b in BLOCKS if b.language == language]


def skip_unless_run(block: Block) -> None:
    if not block.run:
        pytest.skip(f"{block.where}: {block.marker}")


def ini_for(block: Block) -> str | None:
    """The ini block marked as this python block's pytest.ini: the last one before it, with no python block between."""
    ini = None
    for b in (b for b in BLOCKS if b.page == block.page):
        if b.line >= block.line:
            return ini
        if b.language == "ini" and b.marker == INI_FOR_NEXT:
            ini = b.code
        elif b.language == "python":
            ini = None
    return ini


def test_every_block_says_what_it_is_and_is_run_or_says_why_not() -> None:
    assert any(b.page == "README.md" for b in BLOCKS), "README.md has no fenced blocks: is this the right file?"
    for b in BLOCKS:
        assert b.language, f"{b.where}: name the fence's language (python, bash, ini to run it; text or console if not)"
        if b.language not in RUN_LANGUAGES or not b.run:
            continue
        if b.language == "ini":
            assert b.marker == INI_FOR_NEXT, f"{b.where}: an ini block must say what it is for: <!-- {INI_FOR_NEXT} -->"
            following = [p for p in BLOCKS if p.page == b.page and p.line > b.line and p.language in ("python", "ini")]
            assert following and following[0].language == "python" and following[0].run, (
                f"{b.where}: the next block after this pytest.ini must be a python block that runs")
        else:
            assert not b.marker, f"{b.where}: unknown marker <!-- {b.marker} -->; use <!-- not run: REASON --> or none"
    assert any(b.run for b in of("python")) and any(b.run for b in of("bash")), "no README block runs: nothing is tested"


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.where)
def test_python_block_runs_in_a_fresh_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, block: Block) -> None:
    skip_unless_run(block)
    # The CPU path of every snippet, whatever this machine has: no GPU, Triton's interpreter, nothing timed.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ini = ini_for(block)
    if ini is not None:
        pytester.makeini(ini)
    pytester.makepyfile(**{f"test_readme_{block.line}": block.code})
    # --strict-config: an ini key the plugin does not know is an error, not a warning.
    result = pytester.runpytest_subprocess("--correctness-only", "--strict-config", "-p", "no:cacheprovider",
                                           timeout=SUBPROCESS_TIMEOUT_S)
    outcomes = result.parseoutcomes()
    output = "\n".join(result.outlines[-40:] + result.errlines[-20:])
    assert result.ret == 0, f"{block.where}: the block fails as a test file:\n{output}"
    assert outcomes.get("passed", 0) >= 1, f"{block.where}: no test passed:\n{output}"
    assert set(outcomes) <= {"passed", "warnings"}, f"{block.where}: {outcomes}\n{output}"


def missing_commits(code: str) -> list[str]:
    """Commits a shell block reads with `git show REV:path` that this clone lacks (a shallow CI checkout)."""
    revs = set(re.findall(r"git show ([0-9a-f]{7,40}):", code))
    return sorted(r for r in revs if subprocess.run(["git", "cat-file", "-e", f"{r}^{{commit}}"], cwd=ROOT,
                                                     capture_output=True).returncode != 0)


@pytest.mark.parametrize("block", of("bash"), ids=lambda b: b.where)
def test_shell_block_runs_in_this_repository(block: Block) -> None:
    skip_unless_run(block)
    missing = missing_commits(block.code)
    if missing:
        pytest.skip(f"{block.where} reads commit(s) {', '.join(missing)}, which this clone does not have (shallow?)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    # `python` and `pytest` in the block are this interpreter's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, (
        f"{block.where}: exit {proc.returncode}\n{block.code}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    assert proc.stdout.strip(), f"{block.where}: printed nothing"


@pytest.fixture(scope="module")
def help_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty folder outside this repository: no conftest, no ini, no tests."""
    return tmp_path_factory.mktemp("help")


@pytest.fixture(scope="module")
def help_text(help_dir: Path) -> str:
    """pytest --help with every installed plugin (speedgate, xdist, benchmark, timeout...), and the --help of speedgate's
    commands."""
    where = help_dir
    texts = []
    for args in (["-m", "pytest", "--help", "-p", "no:cacheprovider"], ["-m", "speedgate", "compare", "--help"],
                 ["-m", "speedgate", "history", "--help"], ["-m", "speedgate", "history", "import", "--help"],
                 ["-m", "speedgate", "history", "page", "--help"], ["-m", "speedgate", "evidence", "--help"],
                 ["-m", "speedgate", "study", "--help"]):
        proc = subprocess.run([sys.executable, *args], cwd=where, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
        assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        texts.append(proc.stdout)
    return "\n".join(texts)


def accepted_by_pytest(option: str, cwd: Path) -> bool:
    """Whether pytest's parser takes this option, as a switch or with a value (a usage error is exit code 4)."""
    for arg in (option, f"{option}=x"):
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", arg],
                              cwd=cwd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
        if proc.returncode != pytest.ExitCode.USAGE_ERROR:
            return True
    return False


@pytest.mark.xdist_group("readme-help")  # one worker builds the module's --help texts, once
def test_every_option_the_readme_names_exists(help_text: str, help_dir: Path) -> None:
    text = TEXT
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", text))
    known = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", help_text))
    assert "--update-baselines" in known, "pytest --help lists no speedgate option: is the plugin installed?"
    for option, usage in OTHER_TOOLS.items():
        if option in named:
            assert usage in text, f"the README or a docs page names {option}, which is not pytest's; only as `{usage}`"
    # Options of the repository's tools (python tools/X.py --flag): X.py's parser must define them, and the README
    # names them only on a line that runs a tool.
    tool_lines = "\n".join(line for line in text.splitlines() if "tools/" in line or "lab/" in line or "lab." in line)
    for tool in [*ROOT.glob("tools/*.py"), *ROOT.glob("lab/*.py")]:
        for option in re.findall(r'add_argument\("(--[a-z][a-z0-9-]*)"', tool.read_text()):
            if option in named - known and option in tool_lines:
                known.add(option)
    # A page's example conftest.py (docs/hooks.md; tests/test_hooks.py runs them) defines options of its own.
    for block in BLOCKS:
        if block.marker.startswith("not run: a conftest.py"):
            known.update(re.findall(r'option="(--[a-z][a-z0-9-]*)"', block.code))
    # --help shows one name per option (--junit-xml, not its alias --junitxml): ask the parser about the rest.
    unknown = sorted(o for o in named - known - set(OTHER_TOOLS) if not accepted_by_pytest(o, help_dir))
    assert not unknown, (
        f"the README or a docs page names options that neither pytest (with its plugins) nor speedgate compare has: {unknown}")


@pytest.mark.xdist_group("readme-help")  # one worker builds the module's --help texts, once
def test_every_ini_key_and_variable_the_readme_names_exists(help_text: str) -> None:
    text = TEXT
    for key in sorted(set(re.findall(r"\bspeedgate_[a-z_]*[a-z]\b", text))):
        assert re.search(rf"^\s+{key} \(", help_text, re.MULTILINE), f"the docs name ini key {key}; pytest --help lists no such key"
    sources = "\n".join(p.read_text() for p in [*ROOT.glob("plugin/speedgate/**/*.py"), ROOT / "conftest.py"])
    for variable in sorted(set(re.findall(r"\bSPEEDGATE_[A-Z_]*[A-Z]\b", text))):
        assert variable in sources, f"the docs name {variable}; neither the plugin nor conftest.py reads it"


def test_every_path_the_readme_names_exists() -> None:
    for page in PAGES:
        text = page.read_text()
        for path in sorted(set(re.findall(r"(?<![\w/.-])((?:plugin|perftests|tools|tests|baselines|docs|\.ci|\.github)/[\w./-]*)", text))):
            assert (ROOT / path.rstrip(".")).exists(), f"{name(page)} names {path}, which does not exist"


def relative_links(text: str) -> list[str]:
    """The targets of a Markdown text's links and images that point into the repository (no URL, no bare anchor)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_link_between_the_pages_resolves() -> None:
    pages = [README, *sorted((ROOT / "docs").rglob("*.md")), ROOT / "CHANGELOG.md"]
    for page in pages:
        for target in relative_links(page.read_text()):
            assert (page.parent / target.split("#")[0]).exists(), f"{name(page)} links to {target}, which does not exist"


def test_the_layout_names_every_module() -> None:
    layout = LAYOUT.read_text()
    modules = [*ROOT.glob("plugin/speedgate/**/*.py"), *ROOT.glob("perftests/*/*.py"), *ROOT.glob("tools/*.py"),
               *ROOT.glob("lab/**/*.py")]
    for module in modules:
        if module.name == "__init__.py":
            continue
        assert re.search(rf"`[^`\s]*\b{module.stem}(\.py)?`", layout), (
            f"{name(LAYOUT)} does not name {module.relative_to(ROOT)}: add it, with one line on what it owns")


def test_the_readme_stays_a_reference() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move detail to a page under docs/")
    for page in PAGES:
        if name(page) in POINTER_PAGES:
            continue
        # Link targets may carry a date (a results page's chart); the text may not.
        text = re.sub(r"\]\([^)]*\)", "]()", page.read_text())
        dates = sorted(set(re.findall(r"\b20\d\d-\d\d-\d\d\b", text)))
        assert not dates, (f"{name(page)} names {dates}: a dated measurement belongs on a page under docs/results/, "
                           "and the reference links to it")
        counts = re.findall(r"\b\d+ (?:passed|failed|skipped|tests)\b", text)
        assert not counts, f"{name(page)} states test counts that go stale: {counts}"


def cpu_tolerance_problems(blocks: list[Block], cpu_default: float) -> list[str]:
    """Ini blocks a CPU run uses (the pytest.ini of a python block that runs) whose speedgate_tolerance would replace
    the CPU's default with a smaller one."""
    problems = []
    for b in blocks:
        if b.language != "ini" or b.marker != INI_FOR_NEXT:
            continue
        parser = configparser.ConfigParser()
        parser.read_string(b.code)
        value = parser.get("pytest", "speedgate_tolerance", fallback=None)
        if value is not None and float(value) < cpu_default:
            problems.append(f"{b.where}: speedgate_tolerance = {value} replaces the {cpu_default:.0%} default of CPU "
                            "hardware keys for every run of this example, the CPU's included; leave it unset")
    return problems


def test_no_example_ini_lowers_the_cpu_tolerance() -> None:
    assert not cpu_tolerance_problems(BLOCKS, DEFAULT_CPU_TOLERANCE), cpu_tolerance_problems(BLOCKS, DEFAULT_CPU_TOLERANCE)


def test_the_cpu_tolerance_check_catches_the_old_example() -> None:
    """The README's example pytest.ini once set 0.15, silently replacing the CPU's 35%: the check above must see it."""
    old = ("<!-- pytest.ini of the next python block -->\n```ini\n[pytest]\nspeedgate_baseline_dir = baselines\n"
           "speedgate_tolerance = 0.15\nspeedgate_budget = 2\n```\n\n```python\ndef test_x(perf):\n    pass\n```\n")
    problems = cpu_tolerance_problems(fenced_blocks(old), DEFAULT_CPU_TOLERANCE)
    assert len(problems) == 1 and "speedgate_tolerance = 0.15" in problems[0]
    assert not cpu_tolerance_problems(fenced_blocks(old.replace("0.15", "0.35")), DEFAULT_CPU_TOLERANCE)


SOURCES = ("plugin/**/*.py", "perftests/**/*.py", "tools/*.py", "lab/**/*.py", "lab/device/*.sh", "conftest.py", ".ci/run")


def named_pages(text: str) -> list[tuple[str, str | None]]:
    """The pages under docs/ a source file names, each with the section it quotes right after the path, if any
    (`docs/results/x.md, "A heading"`), its comment lines joined first so that a name may break across them."""
    flat = re.sub(r"\s+", " ", re.sub(r"\n\s*#\s*", " ", text))
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r'(?<![\w/.-])(docs/[\w./-]+\.md)(?:, (?:section )?"([^"]+)")?', flat)]


def test_every_page_and_section_the_code_names_exists() -> None:
    """A comment that points to a result (the rule: state it, point to where it was measured) must point somewhere:
    the page exists, and the section it quotes is one of its headings or bold leads, in any case."""
    files = sorted({p for pattern in SOURCES for p in ROOT.glob(pattern)})
    assert any("cycles.py" in str(f) for f in files)
    for source in files:
        for path, section in named_pages(source.read_text()):
            page = ROOT / path
            assert page.exists(), f"{source.relative_to(ROOT)} names {path}, which does not exist"
            if section is None:
                continue
            text = page.read_text()
            leads = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
            leads += re.findall(r"^\*\*(.+?)\*\*", text, flags=re.M)
            assert any(section.lower() in lead.lower() for lead in leads), (
                f"{source.relative_to(ROOT)} names the section {section!r} of {path}, which has no such heading")


def test_a_renamed_section_is_caught() -> None:
    assert named_pages('# see (docs/results/a.md, "The old\n    # name"); and docs/b.md.') == [
        ("docs/results/a.md", "The old name"), ("docs/b.md", None)]
