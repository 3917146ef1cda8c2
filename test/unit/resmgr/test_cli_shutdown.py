"""cri-resmgr never outlives a SIGTERM for long: a stuck shutdown ends by force, with every thread's stack."""

from __future__ import annotations

import subprocess
import sys

STUCK_AFTER_ARMING = """
import threading
from resmgr.cli import exit_by_force_after
exit_by_force_after(0.5)
threading.Thread(target=threading.Event().wait, name="stuck-helper", daemon=True).start()
threading.Event().wait()  # the shutdown gets stuck here
"""


def test_a_stuck_shutdown_exits_by_force_with_every_threads_stack() -> None:
    r = subprocess.run([sys.executable, "-c", STUCK_AFTER_ARMING], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert "Timeout (0:00:00.500000)!" in r.stderr
    # Every thread, each with where it waits: what a journal needs to show what got stuck.
    assert r.stderr.count("most recent call first") == 2 and "threading.py" in r.stderr


def test_an_armed_deadline_lets_a_normal_exit_through() -> None:
    r = subprocess.run([sys.executable, "-c", "from resmgr.cli import exit_by_force_after\nexit_by_force_after(30)"],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
