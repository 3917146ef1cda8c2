"""EXTRA_OPTIONS checked against the flag table of cri-resmgr (resmgr.options)."""

from __future__ import annotations

import pytest

from resmgr.config.extra_options import (
    IGNORED,
    IMPLEMENTED,
    REFUSED,
    UPSTREAM_FLAGS,
    ExtraOptionsError,
    check_extra_options,
    known_flags,
    parse_extra_options,
)
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
    ("--no-such-flag=1", "unknown cri-resmgr flag '--no-such-flag'.*; known flags: .*--metrics-address"),
    ("--relay-socket=/tmp/x.sock", "--relay-socket is fixed by the installer"),
    ("--fallback-config /x", "--fallback-config is fixed by the installer"),
    # The installer points kubelet at the relay socket: NRI mode (no relay socket) is not its to choose yet.
    ("--nri", "--nri is fixed by the installer"),
    ("--frontend=nri", "--frontend is fixed by the installer"),
    ("--nri-socket /x", "--nri-socket is fixed by the installer"),
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


# Upstream's (cri-resource-manager's) flags, Go style: every one is implemented, ignored or refused.
@pytest.mark.parametrize("text,tokens,ignored", [
    # the Go extension's README example
    ('EXTRA_OPTIONS="--metrics-interval=10s"', [], ["-metrics-interval"]),
    ("-metrics-interval 1m30s -rebalance-interval=0", ["--rebalance-interval=0"], ["-metrics-interval"]),
    ("-rebalance-interval 1m30s", ["--rebalance-interval=1m30s"], []),
    ("-force-config-signal SIGUSR1", ["--force-config-signal=SIGUSR1"], []),
    ("--force-config-signal=SIGUSR2", ["--force-config-signal=SIGUSR2"], []),
    ("-host-root=/host", ["--sysfs-root=/host"], []),
    ("-disable-policy-switch", ["--disable-policy-switch"], []),
    ("-disable-policy-switch=false -allow-untested-runtimes", [], ["-allow-untested-runtimes"]),
    ("-v=3 -logtostderr -vmodule=policy=4 -disable-ui --log-level debug", ["--log-level", "debug"],
     ["-v", "-logtostderr", "-vmodule", "-disable-ui"]),
    ("-cgroup-mount /sys/fs/cgroup -kubelet-cgroup-root=/kubepods", [], ["-cgroup-mount", "-kubelet-cgroup-root"]),
])
def test_upstream_flags(text: str, tokens: list[str], ignored: list[str]) -> None:
    result = check_extra_options(text)
    assert result.tokens == tokens and result.ignored == ignored
    if ignored:
        assert result.summary().startswith("EXTRA_OPTIONS: accepted, not implemented by this cri-resmgr, ignored: ")
        assert all(flag in result.summary() for flag in ignored)
    assert parse_extra_options(text) == tokens


@pytest.mark.parametrize("text,message", [
    ("-relay-socket=/tmp/x.sock", "--relay-socket is fixed by the installer"),
    ("-runtime-socket /x", "--runtime-socket is fixed by the installer"),
    ("-reset-policy", "would stop cri-resmgr from serving"),
    ("-print-config", "would stop cri-resmgr from serving"),
    ("--metrics-interval=soon", "invalid duration 'soon'"),
    ("-metrics-interval", "needs a value"),
    ("-disable-ui=maybe", "invalid boolean value"),
    ("--metrics-intervall=10s", "did you mean '-metrics-interval'"),
    ("-force-config-signal=SIGTERM", "cannot reload the config"),
    ("-force-config-signal=SIGNOPE", "not a signal name"),
])
def test_upstream_flags_refused_or_invalid(text: str, message: str) -> None:
    with pytest.raises(ExtraOptionsError, match=message):
        check_extra_options(text)


def test_upstream_flag_table_is_consistent() -> None:
    ours = known_flags()
    for flag in UPSTREAM_FLAGS:
        assert flag.status in (IMPLEMENTED, IGNORED, REFUSED)
        if flag.status == IMPLEMENTED:
            assert flag.ours in ours, flag  # an implemented flag becomes a flag this cri-resmgr has
        else:
            assert flag.why, flag  # everything not implemented says why
    assert len({f.name for f in UPSTREAM_FLAGS}) == len(UPSTREAM_FLAGS)
