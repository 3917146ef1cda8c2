"""The compatibility tables (docs/upstream-compat.md, README "Compatibility with cri-resource-manager") are
the schema's and the flag table's, row for row, in both directions; and a policy field called implemented
is one the policy's code reads (an ignored one is not), so neither the tables nor the code can drift."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from resmgr.config import sections
from resmgr.config.compat import (
    IGNORED,
    IMPLEMENTED,
    field_rows,
    flag_group_rows,
    flag_rows,
    markdown,
    section_rows,
    tables,
)
from resmgr.config.extra_options import UPSTREAM_FLAGS
from resmgr.config.schema import CONFIG

ROOT = Path(__file__).resolve().parents[4]
REGENERATE = "regenerate them with `python -m resmgr.config.compat --write`"


def readme_section() -> str:
    text = (ROOT / "docs" / "operations" / "compatibility.md").read_text()
    start = text.index("## Compatibility with cri-resource-manager")
    end = text.find("\n## ", start + 3)
    return text[start:end if end != -1 else len(text)]


def _diff(doc: str, code: str) -> str:
    doc_rows, code_rows = set(doc.splitlines()), set(code.splitlines())
    return (f"only in the docs: {sorted(doc_rows - code_rows)}\nonly in the code: {sorted(code_rows - doc_rows)}\n"
            f"{REGENERATE}")


def test_docs_tables_are_the_schema_and_the_flag_table() -> None:
    found = tables((ROOT / "docs" / "upstream-compat.md").read_text())
    expected = [markdown(field_rows(), "field"), markdown(flag_rows(), "flag")]
    assert len(found) == 2
    for doc, code in zip(found, expected, strict=True):
        assert doc == code, _diff(doc, code)


def test_readme_tables_are_the_schema_and_the_flag_table() -> None:
    found = tables(readme_section())
    expected = [markdown(section_rows(), "section"), markdown(flag_group_rows(), "flags")]
    assert len(found) == 2
    for doc, code in zip(found, expected, strict=True):
        assert doc == code, _diff(doc, code)


def test_every_schema_field_and_upstream_flag_has_a_row() -> None:
    """The generator itself misses nothing: every top-level section, every flag."""
    names = {r.name for r in field_rows()}
    assert set(CONFIG.fields) <= names
    assert {f"-{f.name}" for f in UPSTREAM_FLAGS} == {r.name for r in flag_rows()}
    assert {r.status for r in field_rows()} == {IMPLEMENTED, IGNORED}
    assert all(r.why for r in field_rows() + flag_rows() if r.status != IMPLEMENTED)


POLICY_CODE = {"topology-aware": "topology_aware.py", "balloons": "balloons.py", "static": "static.py",
               "podpools": "podpools.py", "dynamic-pools": "dynamic_pools.py", "static-pools": "static_pools.py"}
# The typed section each policy takes (resmgr.config.sections): where most of its fields are read now.
POLICY_SECTION = {"topology-aware": sections.TopologyAwareSection, "balloons": sections.BalloonsSection,
                  "podpools": sections.PodpoolsSection, "dynamic-pools": sections.DynamicPoolsSection,
                  "static-pools": sections.StaticPoolsSection}
LISTS = ("balloon_types", "pools", "pool_types", "raw")  # validated entries the policy reads by key


@pytest.mark.parametrize("policy", sorted(POLICY_CODE))
def test_implemented_policy_fields_are_read_by_the_policy(policy: str) -> None:
    """A field called implemented is read by the policy or by its typed section, and every typed option
    of that section is used by the policy; an ignored field is read by neither."""
    policy_code = (ROOT / "resmgr" / "policy" / POLICY_CODE[policy]).read_text()
    code = policy_code
    section = POLICY_SECTION.get(policy)
    if section is not None:
        code += inspect.getsource(section)
        for option in dataclasses.fields(section):
            if option.name not in LISTS:
                assert f".{option.name}" in policy_code, (f"{section.__name__}.{option.name} is never read by "
                                                          f"resmgr/policy/{POLICY_CODE[policy]}")
    for row in field_rows():
        m = re.fullmatch(rf"policy\.{re.escape(policy)}\.(?:\w+\[\]\.)?(\w+)", row.name)
        if not m or m.group(1) in ("BalloonTypes", "Pools", "DynamicPoolTypes"):
            continue
        read = f'"{m.group(1)}"' in code
        if row.status == IMPLEMENTED:
            assert read, f"{row.name} is called implemented, but resmgr/policy/{POLICY_CODE[policy]} never reads it"
        else:
            assert not read, (f"resmgr/policy/{POLICY_CODE[policy]} reads {row.name}: drop Ignored() for it in "
                              f"resmgr/config/schema.py and {REGENERATE}")
