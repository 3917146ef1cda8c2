"""The programs' packages depend on each other only as docs/design.md says: the seed operator (extension/) and the
node installer (installer/) never import one another; what both need (the node record format) is its own package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def imported_packages(package: str) -> dict[str, set[str]]:
    """Top-level package -> the files of ``package`` that import it (absolute imports, also inside functions)."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


@pytest.mark.parametrize("package, forbidden", [
    ("extension", {"installer"}),
    ("installer", {"extension"}),
    ("noderecord", {"extension", "installer", "resmgr"}),
])
def test_package_does_not_import(package: str, forbidden: set[str]) -> None:
    imports = imported_packages(package)
    assert imports, f"no imports found under {package}/"  # the walk itself works
    assert {name: sorted(files) for name, files in imports.items() if name in forbidden} == {}


def test_both_programs_import_the_node_record_format() -> None:
    assert "noderecord" in imported_packages("extension")
    assert "noderecord" in imported_packages("installer")
