"""WorkerPool: a thread per call in flight, none kept once idle, and no call ever waiting for a busy one."""

from __future__ import annotations

import threading
import time

import pytest

from resmgr.rpc.workers import WorkerPool


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_calls_in_flight_each_get_a_thread():
    pool = WorkerPool(16, idle_seconds=30, name="t")
    n = 8
    # Every call waits until all n run at once: with fewer than n threads the barrier breaks.
    barrier = threading.Barrier(n, timeout=10)
    done = []
    for i in range(n):
        pool.submit(lambda i=i: done.append((i, barrier.wait())))
    wait_for(lambda: len(done) == n)
    assert pool.threads == n
    pool.shutdown()


def test_an_idle_thread_is_reused_not_multiplied():
    pool = WorkerPool(16, idle_seconds=30, name="t")
    for _ in range(20):
        finished = threading.Event()
        pool.submit(finished.set)
        assert finished.wait(10)
        wait_for(lambda: pool.idle_threads == 1)  # back to waiting before the next call
    assert pool.threads == 1
    pool.shutdown()


def test_a_busy_thread_never_holds_up_the_next_call():
    """A call that blocks (a StopContainer's grace period) must not delay one submitted after it."""
    pool = WorkerPool(16, idle_seconds=30, name="t")
    release = threading.Event()
    pool.submit(release.wait)
    second = threading.Event()
    pool.submit(second.set)
    assert second.wait(10)
    release.set()
    pool.shutdown()


def test_idle_threads_retire_and_new_calls_still_run():
    pool = WorkerPool(16, idle_seconds=0.2, name="t")
    release = threading.Event()
    started = threading.Semaphore(0)
    for _ in range(5):
        pool.submit(lambda: (started.release(), release.wait()))
    for _ in range(5):
        assert started.acquire(timeout=10)
    assert pool.threads == 5
    release.set()
    wait_for(lambda: pool.threads == 0)
    names_before = {t.name for t in threading.enumerate() if t.name.startswith("t-")}
    assert not names_before
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(10)
    pool.shutdown()


def test_max_workers_caps_threads_and_queued_calls_run_later():
    pool = WorkerPool(2, idle_seconds=30, name="t")
    release = threading.Event()
    ran = []
    for i in range(5):
        pool.submit(lambda i=i: (release.wait(), ran.append(i)))
    time.sleep(0.1)
    assert pool.threads == 2
    assert ran == []
    release.set()
    wait_for(lambda: sorted(ran) == [0, 1, 2, 3, 4])
    pool.shutdown()


def test_a_failing_call_is_logged_and_the_thread_goes_on(caplog):
    pool = WorkerPool(1, idle_seconds=30, name="t")
    pool.submit(lambda: 1 / 0)
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(10)
    assert "t call failed" in caplog.text
    pool.shutdown()


def test_shutdown_refuses_new_calls_and_lets_threads_go():
    pool = WorkerPool(4, idle_seconds=30, name="t")
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(10)
    pool.shutdown()
    wait_for(lambda: pool.threads == 0)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(ran.set)


def test_shutdown_can_drop_the_queued_calls():
    pool = WorkerPool(1, idle_seconds=30, name="t")
    release, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def busy() -> None:
        started.set()
        release.wait(10)
        ran.append("busy")
    pool.submit(busy)
    assert started.wait(10)
    pool.submit(ran.append, "queued")  # waits for the one thread
    pool.shutdown(cancel_queued=True)
    release.set()
    wait_for(lambda: pool.threads == 0)
    assert ran == ["busy"]


def test_submits_racing_retirement_never_lose_a_call():
    """Calls submitted just as idle threads time out still all run."""
    pool = WorkerPool(8, idle_seconds=0.01, name="t")
    count = 0
    lock = threading.Lock()

    def bump() -> None:
        nonlocal count
        with lock:
            count += 1

    for i in range(300):
        pool.submit(bump)
        if i % 7 == 0:
            time.sleep(0.01)  # let threads go idle and retire between some submits
    wait_for(lambda: count == 300)
    pool.shutdown()


def test_max_workers_must_be_positive():
    with pytest.raises(ValueError):
        WorkerPool(0)
