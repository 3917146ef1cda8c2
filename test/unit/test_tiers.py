"""Every test file belongs to a tier (fixtures/tiers.py), so each is selected by its tier's marker."""

from __future__ import annotations

from pathlib import Path

from fixtures.tiers import tier_of

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
