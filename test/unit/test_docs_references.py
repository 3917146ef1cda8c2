"""The README and docs/**/*.md name only things that exist: repo paths, make targets, policies.

What counts as a reference (prose words never do):
- a repo path: a token inside `backticks` (or a fenced code block) whose first segment is a top-level
  entry of the repository (`resmgr/...`, `test/...`, `docs/...`, `Makefile`), and every relative
  markdown link target. Absolute paths (/etc/..., node files) are not repo paths; a path with an
  upper-case placeholder (`test/bench/bench_NAME.py`) or a glob is a pattern, not a name.
- a make target: the words after `make` in backticks or a fenced code block, up to the first
  VAR=value or non-target word.
- a policy: `Active: NAME` in backticks or code, `policy.NAME` with a lower-case NAME (a policy's
  config section), and each `## NAME` heading of docs/usage/policies.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resmgr.config.schema import ALIAS_POLICIES
from resmgr.policy.registry import available_policies

ROOT = Path(__file__).resolve().parents[2]
# Paths in Gardener's own repository, cited as sources by the docs that compare us with current Gardener or
# follow its contracts.
GARDENER_PATHS = {ROOT / "docs/development/current-gardener.md": {"docs/development/priority-classes.md",
                                                                  "docs/operations/network_policies.md"},
                  ROOT / "docs/usage/alerts.md": {"docs/extensions/logging-and-monitoring.md",
                                                  "docs/monitoring/alerting.md"}}
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PLACEHOLDER = re.compile(r"[A-Z]{3,}")
_MAKE = re.compile(r"(?<![\w-])make((?:\s+[^\s`]+)+)")
_TARGET_WORD = re.compile(r"[a-z][a-z0-9-]*")
_ACTIVE = re.compile(r"\bActive:\s*([a-z][a-z0-9-]*)")
_POLICY_SECTION = re.compile(r"(?<![\w.-])policy\.([a-z][a-z0-9-]*)(?![\w.-])")
_RULE = re.compile(r"^([^\s:#=$.][^:=]*?):(?!=)", re.M)


def _code(text: str) -> list[str]:
    """The text of every backtick span and fenced code block."""
    blocks = [m.group(0) for m in _FENCE.finditer(text)]
    rest = _FENCE.sub("", text)
    return blocks + [m.group(1) for m in _SPAN.finditer(rest)]


# Build outputs (.gitignore): they exist only after a build, in some checkouts and not others, and the docs
# name what a build writes there; a path under them is not checked.
BUILD_OUTPUTS = {"_out", "build", "dist", "__pycache__"}


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if (not p.name.startswith(".") or p.name == ".ci")
            and p.name not in BUILD_OUTPUTS and not p.name.endswith(".egg-info")}


def repo_paths(text: str) -> set[str]:
    top = _top_level()
    found = set()
    for code in _code(text):
        for token in re.split(r"[\s,;()'\"=]+", code):
            token = token.rstrip(".:").split("::")[0]
            first = token.split("/")[0]
            if first not in top or (first == token and "/" not in token and not (ROOT / token).is_file()):
                continue
            if _PLACEHOLDER.search(token) or any(c in token for c in "*{}<>$"):
                continue
            found.add(re.sub(r":\d+$", "", token))
    return found


def link_targets(text: str) -> set[str]:
    return {t.split("#")[0] for t in _LINK.findall(_FENCE.sub("", text))
            if not re.match(r"[a-z]+:", t) and not t.startswith(("#", "/"))} - {""}


def make_targets(text: str) -> set[str]:
    found = set()
    for code in _code(text):
        for m in _MAKE.finditer(code):
            for word in m.group(1).split():
                if not _TARGET_WORD.fullmatch(word):
                    break
                found.add(word)
    return found


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {word for m in _RULE.finditer(text) for word in m.group(1).split()}


def policy_names(text: str, path: Path) -> set[str]:
    found = {n for code in _code(text) for n in _ACTIVE.findall(code) + _POLICY_SECTION.findall(code)}
    if path == ROOT / "docs" / "usage" / "policies.md":
        found |= {re.split(r"[\s:(]", line[3:].strip(), maxsplit=1)[0]
                  for line in _FENCE.sub("", text).splitlines() if line.startswith("## ")}
    return found


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_named_repo_paths_exist(doc: Path) -> None:
    text = doc.read_text()
    foreign = GARDENER_PATHS.get(doc, set())
    missing = sorted(p for p in repo_paths(text) - foreign if not (ROOT / p).exists())
    missing += sorted(t for t in link_targets(text) if not (doc.parent / t).exists())
    assert not missing, f"{_id(doc)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_named_make_targets_exist(doc: Path) -> None:
    missing = sorted(make_targets(doc.read_text()) - makefile_targets())
    assert not missing, f"{_id(doc)} names make targets the Makefile does not have: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_named_policies_exist(doc: Path) -> None:
    known = set(available_policies()) | set(ALIAS_POLICIES)
    missing = sorted(policy_names(doc.read_text(), doc) - known)
    assert not missing, f"{_id(doc)} names policies the registry does not have: {missing}"


def test_the_checks_see_references() -> None:
    """The extractors find what they are meant to, so an empty result above is not a blind check."""
    text = ("See `test/unit/nope.py` and [x](docs/design.md), run `make setup test SEED=1`;\n"
            "```yaml\npolicy:\n  Active: magic\n```\n`/etc/x` and `test/bench/bench_NAME.py` are not names.\n")
    assert repo_paths(text) == {"test/unit/nope.py"}
    assert link_targets(text) == {"docs/design.md"}
    assert make_targets(text) == {"setup", "test"}
    assert policy_names(text, ROOT / "README.md") == {"magic"}
    assert policy_names("`policy.balloons` `podpools-policy.cfg` `policy.networking.k8s.io`", ROOT) == {"balloons"}
    assert {"setup", "demo", "test", "bench-relay"} <= makefile_targets()


def test_readme_is_at_most_10_kb() -> None:
    assert (ROOT / "README.md").stat().st_size <= 10 * 1024


def _layout_section() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("## Layout")
    return text[start:text.index("\n## ", start + 3)]


def test_design_layout_names_every_package_and_module() -> None:
    layout = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _layout_section()))
    missing = []
    for top in ("extension", "installer", "resmgr"):
        for path in sorted((ROOT / top).rglob("*")):
            if "__pycache__" in path.parts or path.name == "__init__.py":
                continue
            if path.parent.name == "proto":  # generated stubs; the layout names proto/ and its .proto files
                continue
            name = path.stem if path.suffix == ".py" else path.name if path.is_dir() else None
            if name is not None and name not in layout:
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"docs/design.md's Layout does not name: {missing}"


def policy_table() -> str:
    """docs/usage/policies.md's table: the registry's names and descriptions, then the aliases."""
    rows = [f"| `{name}` | {description} |" for name, description in available_policies().items()]
    rows += [f"| `{alias}` | upstream's alias of `{target}`, with its options under `policy.{alias}` |"
             for alias, target in ALIAS_POLICIES.items()]
    return "\n".join(["| `policy.Active` | what it does |", "|---|---|", *rows]) + "\n"


def test_policy_table_is_the_registry() -> None:
    text = (ROOT / "docs" / "usage" / "policies.md").read_text()
    start = text.index("<!-- policy table: from resmgr/policy/registry.py -->\n")
    start = text.index("\n", start) + 1
    found = text[start:text.index("<!-- end policy table -->", start)]
    assert found == policy_table(), f"replace the table in docs/usage/policies.md with:\n{policy_table()}"


def test_layout_names_every_devland_module() -> None:
    """docs/development/layout.md's devland/ entry names each of its modules (the package is not in design.md's
    Layout: it is not shipped)."""
    text = (ROOT / "docs" / "development" / "layout.md").read_text()
    entry = text[text.index("\ndevland/"):text.index("\ntest/ ")]
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", entry))
    modules = sorted(p.stem for p in (ROOT / "devland").glob("*.py") if p.name != "__init__.py")
    assert modules
    assert [m for m in modules if m not in named] == []
