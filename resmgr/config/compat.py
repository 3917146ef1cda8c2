"""The compatibility table with cri-resource-manager, derived from the schema and the flag table.

Every config field upstream accepts and every flag of upstream's ``cri-resmgr`` has one row: implemented,
accepted and ignored (why), or refused (why). docs/upstream-compat.md and the README's section
"Compatibility with cri-resource-manager" carry the tables; a test holds both to ``field_rows`` and
``flag_rows`` in both directions, so neither the docs nor the code can drift. ``python -m
resmgr.config.compat`` prints the tables (to update the docs after a schema change).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from resmgr.config.extra_options import UPSTREAM_FLAGS
from resmgr.config.schema import (
    ALIAS_POLICIES,
    CONFIG,
    FOREIGN_POLICY_FALLBACK,
    FOREIGN_POLICY_NAMES,
    POLICY_NAMES,
)
from resmgr.config.validation import Ignored, ListOf, MapOf, Spec, Struct

IMPLEMENTED, IGNORED = "implemented", "accepted, ignored"


@dataclass(frozen=True)
class Row:
    name: str  # a field path (``[]`` for list items, ``<name>`` for user-chosen keys) or a flag
    status: str
    why: str = ""

    def markdown(self) -> str:
        return f"| `{self.name}` | {self.status} | {self.why} |"


def _walk(spec: Spec, path: str, why: str | None) -> list[Row]:
    rows: list[Row] = []
    if isinstance(spec, Ignored):
        if why is None:
            why = spec.why
        spec = spec.inner
    if path:
        rows.append(Row(path, IGNORED if why is not None else IMPLEMENTED, why or ""))
    if isinstance(spec, Struct):
        for name, child in spec.fields.items():
            rows += _walk(child, f"{path}.{name}" if path else name, why)
    elif isinstance(spec, ListOf):
        rows += [r for r in _walk(spec.item, f"{path}[]", why) if r.name != f"{path}[]"]
    elif isinstance(spec, MapOf):
        rows += [r for r in _walk(spec.value, f"{path}.<name>", why) if r.name != f"{path}.<name>"]
    return rows


def field_rows() -> list[Row]:
    """One row per config field, in schema order, and one per upstream policy name ``policy.Active`` takes."""
    rows = _walk(CONFIG, "", None)
    # memtier's section is topology-aware's (the validator moves it), so it is implemented the same way.
    rows += [Row(f"policy.Active: {name}", IMPLEMENTED) for name in POLICY_NAMES]
    rows += [Row(f"policy.Active: {alias}", IMPLEMENTED, f"runs {target}, memory tiers included")
             for alias, target in ALIAS_POLICIES.items()]
    rows += [Row(f"policy.Active: {name}", IGNORED, f"this policy is not implemented; runs {FOREIGN_POLICY_FALLBACK}")
             for name in FOREIGN_POLICY_NAMES]
    return rows


def flag_rows() -> list[Row]:
    """One row per flag of upstream's cri-resmgr."""
    rows = []
    for flag in UPSTREAM_FLAGS:
        why = flag.why if flag.status != "implemented" else f"as {flag.ours}" + (f" ({flag.why})" if flag.why else "")
        rows.append(Row(f"-{flag.name}", flag.status, why))
    return rows


def _section_of(name: str) -> str:
    """The README groups fields by top-level section, and policy by its sub-sections."""
    head = name.split(":")[0].split(".")
    if head[0] == "policy" and len(head) > 1 and head[1] not in ("Active", "AvailableResources", "ReservedResources"):
        return f"policy.{head[1].split('[')[0]}"
    return head[0].split("[")[0]


def section_rows() -> list[Row]:
    """The README's short table: one row per section, naming what in it is accepted but ignored."""
    grouped: dict[str, list[Row]] = {}
    for row in field_rows():
        grouped.setdefault(_section_of(row.name), []).append(row)
    out = []
    for section, rows in grouped.items():
        ignored = [r for r in rows if r.status == IGNORED]
        whys = "; ".join(dict.fromkeys(r.why for r in ignored))
        if not ignored:
            out.append(Row(section, IMPLEMENTED))
        elif len(ignored) == len(rows):
            out.append(Row(section, IGNORED, whys))
        else:
            names = ", ".join(r.name.removeprefix(section).lstrip(".").removeprefix("policy.") or r.name
                              for r in ignored if not any(r.name.startswith(o.name + ".") for o in ignored))
            out.append(Row(section, f"{IMPLEMENTED}; {IGNORED}: {names}", whys))
    return out


def flag_group_rows() -> list[Row]:
    """The README's flag table: flags with the same status and reason share a row."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for row in flag_rows():
        grouped.setdefault((row.status, row.why), []).append(row.name)
    return [Row("`, `".join(names), status, why) for (status, why), names in grouped.items()]


def markdown(rows: list[Row], first: str) -> str:
    return "\n".join([f"| {first} | status | why |", "|---|---|---|", *(r.markdown() for r in rows)])


def tables(text: str) -> list[str]:
    """The markdown tables in ``text`` (consecutive lines starting with '|'), each as one string."""
    found, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line.rstrip())
        elif current:
            found.append("\n".join(current))
            current = []
    return found


README_SECTION = "## Compatibility with cri-resource-manager"
# The short tables live in this file, under README_SECTION (they left the README, which only links here).
COMPAT_DOC = "docs/operations/compatibility.md"


def replace_tables(text: str, new_tables: list[str], start: int = 0, end: int | None = None) -> str:
    """``text`` with the markdown tables between ``start`` and ``end`` replaced, in order, by ``new_tables``."""
    end = len(text) if end is None else end
    lines = text[start:end].split("\n")
    out: list[str] = []
    pending = list(new_tables)
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            if not pending:
                raise ValueError("more tables in the text than generated ones")
            out.append(pending.pop(0))
            continue
        out.append(lines[i])
        i += 1
    if pending:
        raise ValueError(f"{len(pending)} generated table(s) found no place in the text")
    return text[:start] + "\n".join(out) + text[end:]


def write_docs(root: Path) -> None:
    """Rewrite the tables in docs/upstream-compat.md and docs/operations/compatibility.md."""
    docs = root / "docs" / "upstream-compat.md"
    docs.write_text(replace_tables(docs.read_text(), [markdown(field_rows(), "field"), markdown(flag_rows(), "flag")]))
    readme = root / COMPAT_DOC
    text = readme.read_text()
    start = text.index(README_SECTION)
    end = text.find("\n## ", start + 3)
    readme.write_text(replace_tables(text, [markdown(section_rows(), "section"), markdown(flag_group_rows(), "flags")],
                                     start, end if end != -1 else None))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"]:
        root = Path(args[1]) if len(args) > 1 else Path.cwd()
        write_docs(root)
        sys.stdout.write(f"rewrote the tables in {root / 'docs/upstream-compat.md'} and {root / COMPAT_DOC}\n")
        return 0
    if args:
        sys.stderr.write("usage: python -m resmgr.config.compat [--write [REPO_ROOT]]\n"
                         "  prints the compatibility tables; --write replaces them in docs/upstream-compat.md and\n"
                         "  docs/operations/compatibility.md (REPO_ROOT defaults to the current directory)\n")
        return 2
    sys.stdout.write("## Config fields\n\n" + markdown(field_rows(), "field") + "\n\n## Flags\n\n"
                     + markdown(flag_rows(), "flag") + "\n\n## README: sections\n\n"
                     + markdown(section_rows(), "section") + "\n\n## README: flags\n\n"
                     + markdown(flag_group_rows(), "flags") + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
