"""The relay keeps accepting after it ran out of file descriptors.

Before, the first EMFILE from accept() ended the accept loop silently: the process stayed up and
its socket kept taking connections into the backlog, but nothing answered them ever again.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from integration.relay.relay_process import RelayProcess, answers_version, metric_value
from integration.relay.test_relay_interception_real import eventually

FD_LIMIT = 64


def test_relay_accepts_again_after_running_out_of_descriptors(containerd):
    workdir = Path(tempfile.mkdtemp(prefix="relay-fd-", dir="/tmp"))
    relay = RelayProcess(workdir, containerd.socket)
    relay.argv = ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--", *relay.argv]
    clients: list[socket.socket] = []
    try:
        relay.start()
        # Each connection costs the relay two descriptors (client and runtime side); the kernel
        # queues the rest in the listen backlog, which the relay cannot drain at its limit.
        for _ in range(FD_LIMIT + 20):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(5)
            c.connect(relay.socket)
            clients.append(c)
        # Saturated means the relay itself met EMFILE (its open descriptors then sit a few below the
        # limit: a connection whose runtime side cannot be opened is closed again).
        assert eventually(lambda: _out_of_descriptors(relay), timeout=20), \
            f"relay never reached its descriptor limit ({_open_descriptors(relay)} open)"
        assert _open_descriptors(relay) >= FD_LIMIT - 8
        assert not answers_version(relay.endpoint)  # saturated: a new caller waits in the backlog
        for c in clients:
            c.close()
        clients.clear()
        assert eventually(lambda: answers_version(relay.endpoint), timeout=30), "relay stopped accepting for good"
        assert relay.proc is not None and relay.proc.popen.poll() is None
        # Logged while it happened, and counted (metrics can be read again now).
        assert _out_of_descriptors(relay)
        assert _accept_errors(relay) > 0, relay.metrics_text()
    finally:
        for c in clients:
            c.close()
        relay.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _open_descriptors(relay: RelayProcess) -> int:
    return len(os.listdir(f"/proc/{relay.pid}/fd"))


def _out_of_descriptors(relay: RelayProcess) -> bool:
    return any(e.get("msg", "").startswith(("cannot accept a connection", "cannot open a runtime connection"))
               and "Too many open files" in e.get("msg", "") for e in relay.log_entries())


def _accept_errors(relay: RelayProcess) -> float:
    text = relay.metrics_text()
    return sum(metric_value(text, f'cri_resmgr_relay_errors_total{{kind="{kind}",method="accept"}}')
               for kind in ("emfile", "enfile"))
