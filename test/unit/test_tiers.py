"""Every test file belongs to a tier (fixtures/tiers.py), so each is selected by its tier's marker."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.tiers import tier_of
from fixtures.workers import LANDSCAPE_DIR, LANDSCAPE_GROUPS, group_of

REPO = Path(__file__).resolve().parents[2]


def test_every_test_file_has_a_tier() -> None:
    files = [p.relative_to(REPO).as_posix() for pattern in ("test_*.py", "bench_*.py")
             for p in (REPO / "test").rglob(pattern)]
    assert len(files) > 100
    assert [f for f in files if tier_of(f) is None] == []


def test_tiers() -> None:
    assert tier_of("test/unit/installer/test_supervisor.py") == "unit"
    assert tier_of("test/e2e/local/test_node_agent.py") == "landscape"
    assert tier_of("test/e2e/scenarios.py") is None


def test_every_landscape_file_is_in_exactly_one_worker_group() -> None:
    """A landscape file outside the groups would fail the collection of `make test`; one in two groups would run
    in whichever comes first."""
    on_disk = sorted(p.name for p in (REPO / LANDSCAPE_DIR).glob("test_*.py"))
    grouped = sorted(f for files in LANDSCAPE_GROUPS.values() for f in files)
    assert grouped == on_disk
    assert {group_of(LANDSCAPE_DIR + f) for f in on_disk} == set(LANDSCAPE_GROUPS)


def test_other_files_are_units_of_their_own() -> None:
    path = "test/integration/relay/test_relay_bad_input.py"
    assert group_of(path) == path
    with pytest.raises(LookupError, match="in no group"):
        group_of(LANDSCAPE_DIR + "test_new_scenario.py")
