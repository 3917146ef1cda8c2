"""Two installer runs on one node never interleave: the second waits for the first's flock."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from installer.host import CommandRunner, Host
from installer.node_lock import LOCK_FILE, NodeLock


def host(tmp_path: Path) -> Host:
    return Host(tmp_path, CommandRunner())


def test_second_run_waits_until_the_first_releases(tmp_path: Path) -> None:
    first, second = NodeLock(host(tmp_path)), NodeLock(host(tmp_path))
    assert first.try_acquire()
    assert not second.try_acquire()
    reasons: list[str] = []
    stop = threading.Event()
    got = threading.Event()
    t = threading.Thread(target=lambda: second.acquire(stop, reasons.append, report_every=0) and got.set())
    t.start()
    assert not got.wait(1.0), "the second run got the lock while the first held it"
    assert reasons and "waiting for another installer run" in reasons[0] and "pid" in reasons[0]
    first.release()
    assert got.wait(5.0)
    second.release()
    t.join(5)


def test_stop_while_waiting_gives_up_without_the_lock(tmp_path: Path) -> None:
    first, second = NodeLock(host(tmp_path)), NodeLock(host(tmp_path))
    assert first.try_acquire()
    stop = threading.Event()
    stop.set()
    assert second.acquire(stop) is False
    first.release()


def test_a_dead_holder_frees_the_lock(tmp_path: Path) -> None:
    """The kernel drops a flock with its process: a killed installer never blocks the next one."""
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from pathlib import Path;"
            "from installer.host import CommandRunner, Host; from installer.node_lock import NodeLock;"
            "assert NodeLock(Host(Path(sys.argv[1]), CommandRunner())).try_acquire(); print('held', flush=True);"
            "sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(Path(__file__).parents[3])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        lock = NodeLock(host(tmp_path))
        assert not lock.try_acquire()
        proc.kill()
        proc.wait(10)
        assert lock.try_acquire()
        assert (tmp_path / LOCK_FILE.lstrip("/")).read_text().startswith("pid ")
        lock.release()
    finally:
        proc.kill()
