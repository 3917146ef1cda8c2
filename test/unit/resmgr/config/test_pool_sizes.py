"""podpools' CPU and Instances, read as upstream reads them (its unit test cases among them)."""

from __future__ import annotations

import pytest

from resmgr.config.pool_sizes import Instances, go_parse_int, parse_instances, parse_pool_cpus


@pytest.mark.parametrize(("text", "value"), [
    ("16", 16), ("0x10", 16), ("0o20", 16), ("020", 16), ("0b10000", 16), ("1_6", 16), ("-3", -3), ("0", 0),
])
def test_go_parse_int(text: str, value: int) -> None:
    assert go_parse_int(text) == value


@pytest.mark.parametrize("text", ["", " 1", "1 ", "08", "2500m", "1__0", "0x", "two", "2147483648"])
def test_go_parse_int_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        go_parse_int(text)


def test_pool_cpus() -> None:
    assert parse_pool_cpus(2) == parse_pool_cpus("2") == 2
    assert parse_pool_cpus("0xf") == 15
    for bad in ("two", "2500m", "0", 0, -1):
        with pytest.raises(ValueError, match="invalid CPUs per pool"):
            parse_pool_cpus(bad)
    with pytest.raises(ValueError, match="missing CPUs"):
        parse_pool_cpus(None)


@pytest.mark.parametrize(("text", "parsed", "count"), [
    (None, Instances("count", 1), 1), ("", Instances("count", 1), 1), (3, Instances("count", 3), 3),
    ("3", Instances("count", 3), 3), ("8 CPUs", Instances("cpus", 8), 2), ("9cpu", Instances("cpus", 9), 2),
    ("8 CPU", Instances("cpus", 8), 2), ("100%", Instances("percent", 100), 3), ("95 %", Instances("percent", 95), 3),
    ("50 %", Instances("percent", 50), 1),
])
def test_instances(text, parsed: Instances, count: int) -> None:
    """Counts for 4-CPU instances out of 13 free CPUs."""
    assert parse_instances(text) == parsed
    assert parsed.count(4, 13) == count


@pytest.mark.parametrize("text", ["0x", "100 % CPUs", "-1", -1, "many", "3 cores"])
def test_instances_refused(text) -> None:
    with pytest.raises(ValueError, match="invalid Instances"):
        parse_instances(text)


def test_instances_cpu_budget_beyond_free() -> None:
    with pytest.raises(ValueError, match="insufficient CPUs: 100 required"):
        parse_instances("100 CPUs").count(1, 96)
