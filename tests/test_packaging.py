"""The package's metadata: its hard requirements are what the plugin imports, its PyPI page links nothing relative and
says where the project lives, and the wheel ships py.typed."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the metadata is the same on 3.10

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugin" / "speedgate"


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _requirement_name(requirement: str) -> str:
    return _normalize(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.Module, module_level: bool) -> set[str]:
    """Top-level names of absolute imports: those that run when the module loads, or all of them."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            if module_level and (isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                                 or _is_type_checking(child)):
                continue
            visit(child)

    visit(tree)
    return names - set(sys.stdlib_module_names) - {"__future__", "speedgate"}


def _distributions(modules: set[str]) -> set[str]:
    """The distributions that provide these modules (their own name when not installed here)."""
    provided_by = metadata.packages_distributions()
    return {_normalize(dist) for module in modules for dist in provided_by.get(module, [module])}


def _plugin_imports(module_level: bool) -> set[str]:
    modules: set[str] = set()
    for path in sorted(PLUGIN.rglob("*.py")):
        modules |= _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), module_level)
    return modules


def test_hard_requirements_cover_what_the_plugin_imports_when_it_loads() -> None:
    required = {_requirement_name(r) for r in _project()["dependencies"]}
    missing = _distributions(_plugin_imports(module_level=True)) - required
    assert not missing, f"plugin/speedgate imports these at module level; add them to [project] dependencies: {missing}"


def test_installing_the_plugin_never_installs_torch_or_triton() -> None:
    required = {_requirement_name(r) for r in _project()["dependencies"]}
    assert not required & {"torch", "triton"}, "torch and triton are the user's: keep them out of dependencies"


def test_every_lazy_import_is_in_an_extra() -> None:
    project = _project()
    offered = {_requirement_name(r) for r in project["dependencies"]}
    for requirements in project["optional-dependencies"].values():
        offered |= {_requirement_name(r) for r in requirements}
    # torch and triton are the machine's, installed first and pinned for it: no extra offers them (see below).
    missing = _distributions(_plugin_imports(module_level=False)) - offered - {"torch", "triton"}
    assert not missing, f"plugin/speedgate imports these; offer them in an extra of pyproject.toml: {missing}"


def test_license_metadata() -> None:
    project = _project()
    assert project["license"] == "MIT"
    for name in project["license-files"]:
        assert "MIT License" in (ROOT / name).read_text(encoding="utf-8")
    assert not [c for c in project["classifiers"] if c.startswith("License ::")], (
        "PEP 639: a license expression replaces the License :: classifiers"
    )


# Markdown inline links and images `[text](target)` / `![alt](target)`, reference definitions `[label]: target`,
# and HTML src/href attributes.
LINK_TARGETS = re.compile(
    r"\]\(\s*<?([^)\s>]+)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)|\b(?:src|href)\s*=\s*[\"']([^\"']+)",
    re.MULTILINE,
)


def test_long_description_has_no_relative_links() -> None:
    # PyPI renders the readme outside the repository, so a relative target (docs/x.png) is a broken link there.
    readme = _project()["readme"]
    path = readme if isinstance(readme, str) else readme["file"]
    text = (ROOT / path).read_text(encoding="utf-8")
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.MULTILINE | re.DOTALL)  # code blocks link nothing
    targets = [next(t for t in match.groups() if t) for match in LINK_TARGETS.finditer(text)]
    relative = [t for t in targets if not re.match(r"(https?|mailto):|#", t)]
    assert not relative, f"{path} links relative targets, broken on PyPI: {relative}"


def test_no_extra_installs_torch_or_triton() -> None:
    # An unpinned torch or triton in an extra upgrades the machine's own (triton pulls a torch that pins it, with the
    # CUDA stack): both are installed first, pinned, for the machine.
    for extra, requirements in _project()["optional-dependencies"].items():
        named = {_requirement_name(r) for r in requirements} & {"torch", "triton"}
        assert not named, f"extra {extra!r} installs {sorted(named)}"


def test_every_extra_adds_something_to_the_hard_requirements() -> None:
    required = {_requirement_name(r) for r in _project()["dependencies"]}
    for extra, requirements in _project()["optional-dependencies"].items():
        assert {_requirement_name(r) for r in requirements} - required, f"extra {extra!r} adds nothing"


def test_every_extra_named_by_tox_and_the_workflows_exists() -> None:
    offered = set(_project()["optional-dependencies"])
    tox = (ROOT / "tox.ini").read_text(encoding="utf-8")
    named = {name for block in re.findall(r"^extras =\n((?:    \S+\n)+)", tox, re.MULTILINE) for name in block.split()}
    for workflow in (ROOT / ".github" / "workflows").glob("*.yml"):
        for extras in re.findall(r"\.\[([\w,-]+)\]", workflow.read_text(encoding="utf-8")):
            named |= set(extras.split(","))
    assert named and not named - offered, f"extras named but not offered: {sorted(named - offered)}"


def test_the_sdist_ships_no_test_it_cannot_run(tmp_path: Path) -> None:
    """The plugin's tests need the repository around them (README, tools/, perftests/, tests/conftest.py): an sdist
    that ships test modules without those gives its user a suite that fails to collect."""
    build_meta = pytest.importorskip("setuptools.build_meta")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    shutil.copytree(PLUGIN, source / "plugin" / "speedgate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", source / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    # A fresh interpreter in the copy: setuptools writes its egg-info beside the sources and reads the working folder.
    code = f"import setuptools.build_meta as b; print(b.build_sdist({str(tmp_path / 'dist')!r}))"
    subprocess.run([sys.executable, "-c", code], cwd=source, check=True, capture_output=True, text=True)
    assert build_meta is not None
    (archive,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        shipped = [name.partition("/")[2] for name in tar.getnames()]
    assert not [name for name in shipped if name.startswith("tests/")], "the sdist ships tests it cannot collect"
    assert "plugin/speedgate/plugin.py" in shipped and "plugin/speedgate/schema/baseline-v1.schema.json" in shipped
    assert "plugin/speedgate/py.typed" in shipped


def test_the_metadata_says_what_and_where_the_project_is() -> None:
    project = _project()
    assert {"Homepage", "Documentation", "Changelog", "Issues", "Source"} <= set(project["urls"])
    assert all(url.startswith("https://github.com/speedgate/speedgate") for url in project["urls"].values())
    assert {"pytest", "pytorch", "triton"} <= set(project["keywords"])
    assert [c for c in project["classifiers"] if c.startswith("Development Status ::")] == ["Development Status :: 3 - Alpha"]
    # PEP 561: the classifier says typed, and the wheel carries the marker that makes it so.
    assert "Typing :: Typed" in project["classifiers"] and (PLUGIN / "py.typed").is_file()
    assert "py.typed" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["speedgate"]


def test_one_version_the_packages_and_the_changelogs_newest_release() -> None:
    import speedgate

    assert "version" in _project()["dynamic"], "the version is speedgate.__version__, read by setuptools"
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert released and released[0] == speedgate.__version__, (
        f"speedgate.__version__ is {speedgate.__version__}; CHANGELOG.md's newest release is {released[:1]}")
