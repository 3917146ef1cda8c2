"""The supervisor's relay probe sees a stalled existing connection, as kubelet would.

In front of real containerd sits a byte pump standing in for a relay whose existing
connections stall while new ones are still accepted and answered (the failure a held request
once caused). A Version on a fresh connection cannot see that; the probe's kept connection must.
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import pytest
from integration.relay.relay_process import SocketPump

from installer.cri_check import CriUnavailable, RelayProbe, cri_version
from installer.host import CommandRunner, Host


class StallingPump(SocketPump):
    """Forwards bytes; ``stall_existing`` freezes the connections open at that moment."""

    def __init__(self, listen_path: str, target_path: str) -> None:
        super().__init__(listen_path, target_path)
        self.frozen: set[socket.socket] = set()

    def stall_existing(self) -> None:
        with self._lock:
            self.frozen = set(self._conns)

    def release(self) -> None:
        self.frozen = set()

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:  # type: ignore[override]
        try:
            while data := src.recv(65536):
                while src in self.frozen:
                    time.sleep(0.02)
                dst.sendall(data)
        except OSError:
            pass


def answered(probe: RelayProbe, timeout: float = 10) -> str:
    """The probe's first answer within ``timeout`` seconds (after that, its CriUnavailable)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return probe.check()
        except CriUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def pump(containerd):
    workdir = Path(tempfile.mkdtemp(prefix="probe-", dir="/tmp"))
    p = StallingPump(str(workdir / "relay.sock"), containerd.socket).start()
    yield p
    p.release()
    p.stop()


def test_probe_sees_a_stalled_kept_connection(pump):
    host = Host(Path("/"), CommandRunner())
    endpoint = "unix://" + pump.listen_path
    probe = RelayProbe(host, endpoint, timeout=1.0)
    try:
        assert probe.check().startswith("containerd ")
        pump.stall_existing()
        # A newcomer still gets answers...
        assert cri_version(host, endpoint).startswith("containerd ")
        # ...but the connection kubelet would be using does not move.
        with pytest.raises(CriUnavailable, match="kept open"):
            probe.check()
        pump.release()
        assert answered(probe).startswith("containerd ")
        pump.stop()
        with pytest.raises(CriUnavailable, match="does not exist"):
            probe.check()
    finally:
        probe.close()


def test_probe_reconnects_after_the_relay_restarts(containerd):
    """A kept connection that broke (the relay restarted) is replaced, not reported forever."""
    workdir = Path(tempfile.mkdtemp(prefix="probe-", dir="/tmp"))
    path = str(workdir / "relay.sock")
    host = Host(Path("/"), CommandRunner())
    probe = RelayProbe(host, "unix://" + path, timeout=1.0)
    first = StallingPump(path, containerd.socket).start()
    try:
        probe.check()
        first.stop()
        second = StallingPump(path, containerd.socket).start()
        try:
            # Not a fixed number of checks: each has a 1 s timeout, which a loaded machine can exceed.
            assert answered(probe).startswith("containerd ")
        finally:
            second.stop()
    finally:
        probe.close()
