"""What the running cri-resmgr process holds: no OpenSSL, and no idle threads left from a burst of pod starts.

Both were measured as resident memory (``make bench-relay``): OpenSSL's libraries 4.5 MB, the threads
of 32 parallel pod starts 3.0 MB for good. These tests check the causes on the real process, not the
sizes, which vary with the machine.
"""

from __future__ import annotations

import os
from concurrent import futures

from integration.relay.relay_process import running_relay
from integration.relay.test_relay_concurrency import POLICY, start_pod

from devland.waiting import eventually


def mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[5] for line in maps if len(line.split()) > 5}


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_relay_never_loads_openssl(relay):
    libraries = {os.path.basename(path) for path in mapped_files(relay.pid)}
    assert not [lib for lib in libraries if lib.startswith(("libssl", "libcrypto"))], sorted(libraries)
    # Yet it started from its --force-config file (read and hashed: SHA-256 without OpenSSL) and serves.
    # The relay logs "relay serving" just after it starts serving, which is what the fixture waited for.
    assert eventually(lambda: "relay serving" in [entry.get("msg") for entry in relay.log_entries()])
    assert not [entry for entry in relay.log_entries() if entry.get("level") in ("error", "ERROR", "critical")]


def test_threads_of_a_pod_start_burst_are_let_go(containerd, tmp_path):
    with running_relay(containerd, "--fallback-config", POLICY, prefix="relay-threads-") as relay:
        start_pod(containerd, relay.endpoint, tmp_path, "warm", "besteffort")
        # Settled: no connection open, no intercepted call in flight (crictl has exited).
        assert eventually(lambda: _steady(relay.pid), 30)
        before = thread_count(relay.pid)

        with futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: start_pod(containerd, relay.endpoint, tmp_path, f"b{i}", "besteffort"),
                          range(8)))

        # Each of the 8 calls in flight had a thread of its own; idle, they go (ThreadPoolExecutor kept them).
        assert eventually(lambda: thread_count(relay.pid) <= before, 30), \
            f"{thread_count(relay.pid)} threads after the burst, {before} before"


def _steady(pid: int) -> bool:
    """The thread count is the same over two looks a few seconds apart (idle threads have retired)."""
    first = thread_count(pid)
    eventually(lambda: False, 3)
    return thread_count(pid) == first
