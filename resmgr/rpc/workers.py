"""Threads for calls (the relay's intercepted calls, the Config API's handlers): made on demand,
retired once idle, and daemon threads, so a call that never returns cannot keep the process from
exiting. The stdlib's ThreadPoolExecutor joins its threads at exit: one stuck handler kept the
process alive after SIGTERM (test_unixrpc.py::test_a_stuck_handler_never_keeps_the_process_from_exiting).

An intercepted call keeps its thread until the runtime answers (a StopContainer: its whole
grace period), so a burst of pod starts needs as many threads as calls in flight. The
stdlib's ThreadPoolExecutor never lets a thread go: after 32 parallel pod starts the relay
kept 32 idle threads and 3.0 MB more resident memory for good (their stacks and malloc
arenas; test/bench/bench_relay.py). Here a thread idle for ``idle_seconds`` exits. Making
one costs ~0.1 ms against a pod start's ~200 ms, so retiring them early costs nothing that
shows.

Guarantee: a submitted call never waits for a busy thread while fewer than ``max_workers``
exist; every queued call has an idle thread already woken for it or a new thread of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class WorkerPool:
    """``submit(fn, *args)`` runs ``fn(*args)`` on a thread of its own (up to ``max_workers`` at once)."""

    def __init__(self, max_workers: int, *, idle_seconds: float = 2.0, name: str = "worker") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.idle_seconds = idle_seconds
        self.name = name
        self._ready = threading.Condition(threading.Lock())
        self._calls: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads = 0  # alive, busy or idle
        self._idle = 0  # waiting for a call
        self._made = 0
        self._stopping = False

    @property
    def threads(self) -> int:
        """Threads alive now (busy or idle)."""
        with self._ready:
            return self._threads

    @property
    def idle_threads(self) -> int:
        """Threads waiting for a call."""
        with self._ready:
            return self._idle

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._ready:
            if self._stopping:
                raise RuntimeError(f"{self.name} pool is shut down")
            self._calls.append((fn, args))
            if self._idle >= len(self._calls):
                self._ready.notify()  # an idle thread, woken for this call alone
                return
            if self._threads >= self.max_workers:
                return  # the next thread to finish takes it
            self._threads += 1
            self._made += 1
            name = f"{self.name}-{self._made}"
        try:
            threading.Thread(target=self._work, daemon=True, name=name).start()
        except RuntimeError:  # can't start a new thread: the call waits for a running one
            with self._ready:
                self._threads -= 1
            log.error("cannot start a %s thread; the call waits for a busy one", self.name)

    def shutdown(self, *, cancel_queued: bool = False) -> None:
        """Take no more calls; idle threads exit, busy ones after the calls already queued (or, with
        ``cancel_queued``, after their current call: queued calls are dropped)."""
        with self._ready:
            self._stopping = True
            if cancel_queued:
                self._calls.clear()
            self._ready.notify_all()

    def _next(self) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """The next call, or None when this thread should exit (idle too long, or shut down)."""
        with self._ready:
            while not self._calls:
                if self._stopping:
                    self._threads -= 1
                    return None
                self._idle += 1
                woken = self._ready.wait(self.idle_seconds)
                self._idle -= 1
                if not woken and not self._calls:
                    self._threads -= 1
                    return None
            return self._calls.popleft()

    def _work(self) -> None:
        while (call := self._next()) is not None:
            fn, args = call
            try:
                fn(*args)
            except Exception:
                log.exception("%s call failed", self.name)
            del call, fn, args  # hold nothing of a finished call while idle
