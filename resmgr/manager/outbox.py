"""The resource manager's one way out for updates that no hook call returns: cold starts that end on a timer,
pools rebalanced by CPU usage, configs and Adjustments applied by the config plane.

The outbox is bound once to the relay's sender. An update produced while a hook runs (the config plane
re-applies Adjustments after StartContainer, inside ``AdjustingHook.after``) must not re-enter the relay
from inside its own hook: on that thread the outbox holds it, and the hook returns it as its result.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.resource-manager")


class UpdateSink(Protocol):
    """Sends updates to the runtime (the relay's ``Interceptor.apply_updates``)."""

    def __call__(self, updates: list[ContainerUpdate], reason: str, /) -> object:
        """Send ``updates``, ordered by their ``seq``; ``reason`` names what produced them (logs, metrics)."""
        ...


class UpdateOutbox:
    """An ``UpdateSink`` bound once to the real one; holds a hook's own updates while ``held`` on that thread."""

    def __init__(self, sink: UpdateSink | None = None) -> None:
        self._sink = sink
        self._local = threading.local()
        self._on_bound: list[Callable[[], None]] = []

    @property
    def bound(self) -> bool:
        """Whether updates go anywhere yet (before ``bind`` they are dropped: nothing is placed yet that needs them)."""
        return self._sink is not None

    def bind(self, sink: UpdateSink) -> None:
        """Send to ``sink`` from now on (once: the relay, once started); then run the ``when_bound`` callbacks."""
        if self._sink is not None:
            raise RuntimeError("the update outbox is bound already")
        self._sink = sink
        for callback in self._on_bound:
            callback()

    def when_bound(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outbox is bound (now, if it is): timers arm only when their updates can go out."""
        self._on_bound.append(callback)
        if self._sink is not None:
            callback()

    def __call__(self, updates: list[ContainerUpdate], reason: str, /) -> None:
        held: list[ContainerUpdate] | None = self._local.__dict__.get("held")
        if held is not None:
            held.extend(updates)
            return
        if not updates:
            return
        if self._sink is None:
            log.warning("%d container updates (%s) dropped: the relay has not started", len(updates), reason)
            return
        self._sink(updates, reason)

    @contextmanager
    def held(self) -> Iterator[list[ContainerUpdate]]:
        """While a hook runs on this thread: what this thread sends is collected in the yielded list instead."""
        outer = self._local.__dict__.get("held")
        mine: list[ContainerUpdate] = []
        self._local.held = mine
        try:
            yield mine
        finally:
            self._local.held = outer
