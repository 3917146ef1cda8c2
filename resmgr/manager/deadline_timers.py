"""One timer per key, due at a wall-clock deadline (cold starts): kept in step with what the policy wants.

The resource manager hands ``sync`` the deadlines after every decision; a key whose deadline is new or
moved is (re-)armed, a key no longer wanted is cancelled. ``fire(key)`` runs on the timer's thread.
Deadlines are ``time.time()`` values, so ones read back from the cache after a restart still hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping


class DeadlineTimers:
    def __init__(self, fire: Callable[[str], None], *, clock: Callable[[], float] = time.time) -> None:
        self._fire = fire
        self._clock = clock
        self._armed: dict[str, tuple[float, threading.Timer]] = {}
        self._lock = threading.Lock()

    def sync(self, deadlines: Mapping[str, float]) -> None:
        """Arm a timer for every key of ``deadlines`` not armed for that time; cancel the others."""
        with self._lock:
            if not deadlines and not self._armed:
                return
            for key in [k for k, (due, _) in self._armed.items() if deadlines.get(k) != due]:
                self._armed.pop(key)[1].cancel()
            now = self._clock()
            for key, due in deadlines.items():
                if key not in self._armed:
                    timer = threading.Timer(max(0.0, due - now), self._run, args=(key, due))
                    timer.daemon = True
                    self._armed[key] = (due, timer)
                    timer.start()

    def _run(self, key: str, due: float) -> None:
        with self._lock:
            armed = self._armed.get(key)
            if armed is None or armed[0] != due:
                return  # cancelled or re-armed meanwhile
            del self._armed[key]
        self._fire(key)

    def armed(self) -> dict[str, float]:
        with self._lock:
            return {key: due for key, (due, _) in self._armed.items()}

    def cancel_all(self) -> None:
        with self._lock:
            for _, timer in self._armed.values():
                timer.cancel()
            self._armed.clear()
