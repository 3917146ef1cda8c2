"""EXTRA_OPTIONS checked against the flag table of cri-resmgr (resmgr.options)."""

from __future__ import annotations

import pytest

from resmgr.config.extra_options import ExtraOptionsError, known_flags, parse_extra_options
from resmgr.options import build_parser


def test_known_flags_come_from_cri_resmgr_parser() -> None:
    expected = {o for a in build_parser()._actions for o in a.option_strings}
    assert set(known_flags()) == expected
    assert "--metrics-address" in expected


@pytest.mark.parametrize("text,tokens", [
    ("--metrics-address=127.0.0.1:9999 --log-level debug",
     ["--metrics-address=127.0.0.1:9999", "--log-level", "debug"]),
    ('EXTRA_OPTIONS="--workers=8"\n', ["--workers=8"]),
    ("# comment\n\n--log-format json\n", ["--log-format", "json"]),
    ("", []),
])
def test_extra_options_accepted(text: str, tokens: list[str]) -> None:
    assert parse_extra_options(text) == tokens


@pytest.mark.parametrize("text,message", [
    ("--no-such-flag=1", "unknown cri-resmgr flag '--no-such-flag'; known flags: .*--metrics-address"),
    ("--relay-socket=/tmp/x.sock", "--relay-socket is fixed by the installer"),
    ("--fallback-config /x", "--fallback-config is fixed by the installer"),
    ("--version", "would stop cri-resmgr from serving"),
    ("--workers=many", "argument --workers: .*'many'"),
    ("--log-level loud", "invalid choice: 'loud'"),
    ("stray", "unrecognized arguments: stray"),
    ('--metrics-address="a b"', "cannot be passed through a systemd EnvironmentFile"),
    ("--log-level=$(reboot)", "cannot be passed through a systemd EnvironmentFile"),
    ('"unterminated', "cannot split"),
    ("--workers=1 " * 3000, "over the limit"),
])
def test_extra_options_rejected_with_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ExtraOptionsError, match=message):
        parse_extra_options(text)
