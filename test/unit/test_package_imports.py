"""The programs' packages depend on each other only as docs/design.md says: the seed operator (extension/) and the
node installer (installer/) never import one another; what both need (the node record format) is its own package.
The local landscape (devland/) stands on its own: it never reaches into test/, hacks/ never puts test/ on sys.path,
and no shipped package imports it."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
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


# The top-level names test/ provides (pytest's pythonpath has test/): fixtures and the test packages.
TEST_TREE = {"fixtures", "unit", "integration", "e2e", "bench", "conftest"}
SHIPPED = ("admission", "extension", "installer", "noderecord", "resmgr")


@pytest.mark.parametrize("package, forbidden", [
    ("extension", {"installer", "devland", "admission"}),
    # The garden's admission runs the extension's own validation (extension.shoot_config), never the node side.
    ("admission", {"installer", "devland", "kopf", "kubernetes"}),
    ("installer", {"extension", "devland"}),
    ("noderecord", {"extension", "installer", "resmgr", "devland"}),
    ("resmgr", {"extension", "installer", "devland"}),
    ("devland", TEST_TREE),
])
def test_package_does_not_import(package: str, forbidden: set[str]) -> None:
    imports = imported_packages(package)
    assert imports, f"no imports found under {package}/"  # the walk itself works
    assert {name: sorted(files) for name, files in imports.items() if name in forbidden} == {}


def test_both_programs_import_the_node_record_format() -> None:
    assert "noderecord" in imported_packages("extension")
    assert "noderecord" in imported_packages("installer")


def _strings_and_sys_path_calls(path: Path) -> tuple[list[str], list[str]]:
    """The string constants of a file that are not docstrings, and the source of its sys.path changes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    strings = [node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]
    calls = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)
             and ast.unparse(node.func).startswith("sys.path.")]
    return strings, calls


def _names_test_tree(source: str) -> bool:
    return "'test'" in source or "test/" in source or "/ 'fixtures'" in source


def test_devland_never_reaches_into_test() -> None:
    """No relative import out of the package, no path into test/ (``REPO / "test"``, "test/..."), no sys.path
    changes: the demo and hacks/ use devland/ without the test tree."""
    files = sorted((REPO / "devland").rglob("*.py"))
    assert files
    found = []
    for path in files:
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                found.append(f"{rel}: from {'.' * node.level}{node.module or ''}")
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _names_test_tree(ast.unparse(node)):
                found.append(f"{rel}: {ast.unparse(node)}")
        strings, calls = _strings_and_sys_path_calls(path)
        found += [f"{rel}: {s!r}" for s in strings if s.startswith(("test/", "fixtures/"))]
        found += [f"{rel}: {c}" for c in calls]
    assert found == []


def test_hacks_do_not_put_test_on_sys_path() -> None:
    files = sorted([*(REPO / "hacks").glob("*.py"), *(REPO / "hacks").glob("*.spec")])
    assert any("sys.path.insert" in c for f in files for c in _strings_and_sys_path_calls(f)[1])  # the walk works
    found = [f"{f.relative_to(REPO)}: {c}" for f in files for c in _strings_and_sys_path_calls(f)[1]
             if _names_test_tree(c)]
    assert found == []


def test_the_landscape_is_not_packaged() -> None:
    """The wheel (and so the images' venv) takes only the shipped packages; the one-file build bundles what they
    import (above: never devland) and its sources hash (build-executable.sh) names them too."""
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert [p for p in include if fnmatch.fnmatch("devland", p)] == []
    assert all(any(fnmatch.fnmatch(pkg, p) for p in include) for pkg in SHIPPED)
    build = (REPO / "hacks" / "build-executable.sh").read_text()
    assert "find " + " ".join(("resmgr", "installer", "noderecord", "extension", "admission")) in build
    assert "devland" not in build and "devland" not in (REPO / "hacks" / "cri-resmgr.spec").read_text()
    assert "devland" in (REPO / ".dockerignore").read_text().split()
