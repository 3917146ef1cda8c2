"""One installer run at a time per node: an exclusive flock held for the run's whole life.

Two installer pods meet on a node in a surge rollout, or when an install pod is still
terminating while the uninstall pod starts; interleaved journal writes from both could lose
a backup. The lock lives in /run (not in the journal's directory, which uninstall removes,
and which would let a third run lock a fresh file while the second waits on the deleted one);
/run is emptied at boot, and the kernel drops the lock when its holder dies.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable

from installer.host import Host

log = logging.getLogger("installer.node_lock")

LOCK_FILE = "/run/cri-resmgr-installer.lock"


class NodeLock:
    def __init__(self, host: Host, path: str = LOCK_FILE) -> None:
        self.path = host.path(path)
        self.fd: int | None = None

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def try_acquire(self) -> bool:
        """Take the lock if it is free; never blocks."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} ({os.environ.get('HOSTNAME', 'installer')})\n".encode())
        self.fd = fd
        return True

    def acquire(self, stop: threading.Event, waiting: Callable[[str], None] = lambda reason: None,
                report_every: float = 10.0) -> bool:
        """Wait for the lock until ``stop`` is set; ``waiting`` is told why, now and then. True once held."""
        last = float("-inf")
        while not stop.is_set():
            if self.try_acquire():
                return True
            now = time.monotonic()
            if now - last >= report_every:
                reason = f"waiting for another installer run on this node to finish (lock {LOCK_FILE}: {self.holder()})"
                log.warning(reason)
                waiting(reason)
                last = now
            stop.wait(0.5)
        return False

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = None
