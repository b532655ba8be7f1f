"""The lab builds its variants from the suite's kernels only through the names each kernel module makes public (its
blocks, its kernels' handles): no lab module reaches into a kernel module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1]
KERNELS = "perftests.kernels"


def private_uses(source: str) -> list[str]:
    """'module.name' of every private name a module takes from a perftests.kernels module: imported by name, or read
    as an attribute of the module it imported (under any alias)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == KERNELS:
            aliases.update({alias.asname or alias.name: alias.name for alias in node.names})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{KERNELS}."):
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
        elif isinstance(node, ast.Import):
            aliases.update({alias.asname: alias.name.rpartition(".")[2] for alias in node.names
                            if alias.name.startswith(f"{KERNELS}.") and alias.asname})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_")):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


@pytest.mark.parametrize("module", sorted(LAB.glob("*.py")), ids=lambda p: p.name)
def test_the_lab_uses_no_private_name_of_the_suites_kernels(module: Path) -> None:
    assert private_uses(module.read_text()) == [], f"{module.name} reaches into the suite's kernels' private names"


def test_the_check_sees_a_private_name_however_it_is_reached() -> None:
    source = ("from perftests.kernels import attention as attn\nfrom perftests.kernels.matmul import _prune, tile_configs\n"
              "import perftests.kernels.matmul_gluon as mg\nattn._scores\nattn.block_scores\nmg._halves\n")
    assert private_uses(source) == ["attention._scores", "matmul_gluon._halves", "perftests.kernels.matmul._prune"]
