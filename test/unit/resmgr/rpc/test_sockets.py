"""CRI endpoint strings and socket paths."""

from __future__ import annotations

import pytest

from resmgr.rpc.sockets import endpoint_path, endpoint_target


def test_endpoints():
    assert endpoint_target("/run/c.sock") == "unix:///run/c.sock"
    assert endpoint_target("unix:///run/c.sock") == "unix:///run/c.sock"
    assert endpoint_path("unix:///run/c.sock") == "/run/c.sock"
    assert endpoint_path("unix:/run/c.sock") == "/run/c.sock"
    assert endpoint_path("/run/c.sock") == "/run/c.sock"
    with pytest.raises(ValueError, match="unix socket"):
        endpoint_target("tcp://1.2.3.4:5")
    for relative in ("run/c.sock", "unix://run/c.sock", "unix:run/c.sock"):
        with pytest.raises(ValueError):
            endpoint_path(relative)
