"""Quantities as configs, Adjustments and the webhook's annotation write them."""

from __future__ import annotations

import pytest

from resmgr.config import parse_memory_quantity


@pytest.mark.parametrize(("text", "value"), [("1Gi", 1 << 30), ("512M", 512_000_000), (1024, 1024),
                                             ("1.5Ki", 1536), ("2e3", 2000)])
def test_memory_quantities(text: object, value: int) -> None:
    assert parse_memory_quantity(text) == value


@pytest.mark.parametrize("text,expected", [("1Gi", 2**30), ("1G", 10**9), ("512Mi", 512 * 2**20), (1024, 1024),
                                           ("1.5Ki", 1536)])
def test_memory_quantities_of_adjustments(text, expected):
    assert parse_memory_quantity(text) == expected


@pytest.mark.parametrize(("text", "value"), [
    ("500m", 1), ("1000m", 1), ("1001m", 2), ("2500m", 3),  # milli-bytes round up, as the API server does
    ("1.5", 2), (1.5, 2), ("2E", 2 * 10**18), ("1Ei", 2**60),
])
def test_fractions_of_a_byte_round_up(text: object, value: int) -> None:
    assert parse_memory_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1X", "Gi", "-1Gi", "1 Gi Gi", True, None, [1]])
def test_bad_memory_quantities(text: object) -> None:
    with pytest.raises(ValueError, match="memory quantity"):
        parse_memory_quantity(text)


@pytest.mark.parametrize(("text", "value"), [
    ("1234567890123456789012345678901", 1234567890123456789012345678901),  # more digits than Decimal's 28
    ("1.0000000000000000000000000000001Gi", 2**30 + 1),  # the tiny fraction still rounds up
    ("1.5e-3", 1), ("25e-1", 3), ("0.000e5", 0), ("12.5e2k", 1_250_000),
])
def test_memory_quantities_are_exact(text: str, value: int) -> None:
    assert parse_memory_quantity(text) == value


def test_an_absurd_exponent_is_refused_not_computed() -> None:
    with pytest.raises(ValueError, match="memory quantity"):
        parse_memory_quantity("1e999999999")
