"""Container updates land in decision order: a container never ends up with a stale cpuset.

Intercepted calls run concurrently, and the updates a decision makes for other containers
are sent outside the resource manager's lock. Two decisions can therefore race to update
the same container. Each update carries its decision's number (``ContainerUpdate.seq``,
given under the resource manager's lock), and here, per container:

* sends are one at a time (a lock per container; different containers go in parallel);
* an update older than one the container already got is dropped: the newest wins;
* a request the relay forwards that itself sets the container's cpuset (kubelet's
  UpdateContainerResources) takes the same lock; if a newer update had already landed,
  that one is sent again afterwards, so the forwarded (older) cpuset does not stay;
* StartContainer takes it too: an update that races a start is lost in containerd.

Updates from config changes and Adjustments come through the same path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from resmgr.relay.hooks import ContainerUpdate

T = TypeVar("T")

# Containers whose ordering state is kept (least recently updated ones are forgotten first).
MAX_TRACKED = 8192


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    applied: int = 0  # decision number of the newest update the runtime accepted
    newest: ContainerUpdate | None = None


class UpdateOrder:
    """Per-container ordering of ContainerUpdates by decision number (see the module doc)."""

    def __init__(self, max_tracked: int = MAX_TRACKED) -> None:
        self.max_tracked = max_tracked
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._lock = threading.Lock()

    def _slot(self, cid: str) -> _Slot:
        with self._lock:
            slot = self._slots.get(cid)
            if slot is None:
                slot = self._slots[cid] = _Slot()
                if len(self._slots) > self.max_tracked:
                    for old in list(self._slots)[: len(self._slots) - self.max_tracked]:
                        if not self._slots[old].lock.locked():
                            del self._slots[old]
            else:
                self._slots.move_to_end(cid)
            return slot

    def deliver(self, update: ContainerUpdate, send: Callable[[ContainerUpdate], object]) -> bool:
        """Send ``update`` unless the container already got a newer one; False if it was dropped.

        An unnumbered update (seq 0) counts as the newest. ``send`` raising propagates.
        """
        slot = self._slot(update.container_id)
        with slot.lock:
            if update.seq and update.seq < slot.applied:
                return False
            send(update)
            if update.seq >= slot.applied:
                slot.applied, slot.newest = update.seq, update
            return True

    def forward(self, placed: ContainerUpdate, call: Callable[[], T],
                send: Callable[[ContainerUpdate], object]) -> T:
        """Run ``call`` (a forwarded request that sets ``placed``'s cpuset) in order with the updates."""
        slot = self._slot(placed.container_id)
        with slot.lock:
            result = call()
            newer = slot.newest if placed.seq and placed.seq < slot.applied else None
            if newer is None:
                slot.applied, slot.newest = max(slot.applied, placed.seq), placed
        if newer is not None:
            self.deliver(newer, send)
        return result

    def exclusive(self, cid: str, call: Callable[[], T]) -> T:
        """Run ``call`` with no update to ``cid`` going out meanwhile.

        For StartContainer: containerd writes an update to a container that is not running into
        its spec only, and a start that already read the spec creates the task with the old cpuset.
        """
        with self._slot(cid).lock:
            return call()

    def tracked(self) -> int:
        with self._lock:
            return len(self._slots)
