"""Learns from the runtime's ListContainers answers which containers exited, and tells the resource manager.

kubelet sends no CRI call when a container exits: StopContainer and RemoveContainer come much later
(a pod's deletion, garbage collection), so an exited init container or a crashed instance would keep
its CPUs. kubelet does list the runtime's containers about once a second (PLEG's relist:
ListContainers with an empty filter), and the runtime's answer names every exited container. As in
cri-resource-manager, those answers are how the relay learns of exits.

The transports hand each successful answer to ``ExitWatcher.offer`` after it went on to kubelet; the
watcher's own thread reads it and passes the exited containers' ids to the hook's
``containers_exited`` (the hook releases the ones it still holds resources for and returns updates
for the containers that gain CPUs). Only the newest waiting answer is read: a relist that comes while
the watcher is busy replaces the one waiting, and the next relist lists the same exits again.

An exit kubelet has seen must be released before kubelet's next CreateContainer is decided: kubelet
starts a pod's app container when its relist shows the init container exited, and the app container
needs the CPUs. The relay hands the answer over right after sending it, before it relays anything
else from the runtime on that connection, and kubelet creates nothing before it has further answers
(PLEG asks for the changed pod's status first); ``settle``, called before every CreateContainer decision,
then finishes reading what was handed over (at once in the caller's thread if it still waits).

Reading costs 55-75 µs per relist of 200 containers (2 cores, upb; docs/operations/compatibility.md,
'When a container's resources are released'): the answer is
parsed with a message type of our own that names only the two fields read (``id`` and ``state`` of
CRI's ``Container``), so labels, annotations and the rest are skipped, never built.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

from google.protobuf import descriptor_pool, message_factory

from resmgr.relay.cri import api_pb2
from resmgr.relay.hooks import ContainerUpdate
from resmgr.relay.metrics import RelayMetrics

log = logging.getLogger(__name__)

# The CRI call whose answers are read (runtime.v1.RuntimeService).
LISTING_METHOD = "ListContainers"

# Hands exited container ids to the resource manager; returns updates for other containers.
Release = Callable[[Collection[str]], Iterable[ContainerUpdate] | None]
ApplyUpdates = Callable[[Iterable[ContainerUpdate], str], None]

_EXITED = api_pb2.CONTAINER_EXITED


# ``ListContainersResponse`` cut down to ``containers[].id`` (field 1) and ``containers[].state`` (field 6), as a
# serialized FileDescriptorProto of our own: package resmgr.exits, message Listed {string id = 1; int32 state = 6;},
# message Listing {repeated Listed containers = 1;}. The field numbers are CRI's (runtime.v1 api.proto); the rest
# of the answer is unknown to this type, and the parser skips it without making Python objects for it. Written
# out rather than built with descriptor_pb2, whose import costs the relay 0.35 MB of RSS; test_exits.py checks
# that it is the descriptor described here.
LISTING_DESCRIPTOR = (
    b'\n resmgr/relay/exits_listing.proto\x12\x0cresmgr.exits"#\n\x06Listed\x12\n\n\x02id\x18\x01 \x01(\t\x12\r'
    b'\n\x05state\x18\x06 \x01(\x05"3\n\x07Listing\x12(\n\ncontainers\x18\x01 \x03(\x0b2\x14.resmgr.exits.Listed'
    b'b\x06proto3')


def _listing_class() -> type[Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(LISTING_DESCRIPTOR)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("resmgr.exits.Listing"))


_Listing = _listing_class()


def can_show_exits(request: bytes | memoryview) -> bool:
    """Whether a ListContainers request may be answered with exited containers (a state filter other
    than EXITED cannot: the listing of running containers for kubelet's runtime cache is not read)."""
    parsed = api_pb2.ListContainersRequest.FromString(request)
    return not (parsed.HasField("filter") and parsed.filter.HasField("state")
                and parsed.filter.state.state != _EXITED)


def exited_containers(response: bytes | memoryview) -> list[str]:
    """The ids of the containers a ListContainersResponse lists as exited."""
    return [c.id for c in _Listing.FromString(response).containers if c.state == _EXITED]


class ExitWatcher:
    """Reads ListContainers answers on a thread of its own and hands exited containers to ``release``.

    The thread also sends the updates the releases ask for (other containers' cpusets growing back), so
    that ``settle`` makes a CreateContainer wait for the release decision only, never for runtime calls.
    """

    def __init__(self, release: Release, apply_updates: ApplyUpdates, metrics: RelayMetrics) -> None:
        self.release = release
        self.apply_updates = apply_updates
        self.metrics = metrics
        self._cond = threading.Condition(threading.Lock())
        self._waiting: tuple[bytes | memoryview, bytes | memoryview] | None = None
        self._outbox: list[ContainerUpdate] = []  # decided by ``settle``, sent by the thread
        self._reading = False  # the thread is deciding on an answer
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            self._closed = False
        self._thread = threading.Thread(target=self._run, name="exit-watcher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def offer(self, request: bytes | memoryview, response: bytes | memoryview) -> None:
        """A ListContainers request and the runtime's successful answer (gRPC messages, unframed).

        Called by the transport after the answer was sent on; only stores it, the reading is done later.
        """
        with self._cond:
            self._waiting = (request, response)
            self._cond.notify_all()

    def settle(self) -> None:
        """Decide on the answers handed over so far (before a CreateContainer is decided)."""
        with self._cond:
            waiting, self._waiting = self._waiting, None
            while self._reading:
                self._cond.wait()
        if waiting is None:
            return
        updates = self._decide(*waiting)
        if updates:
            with self._cond:
                self._outbox += updates
                self._cond.notify_all()

    def observe(self, request: bytes | memoryview, response: bytes | memoryview) -> None:
        """Read one answer, hand its exited containers over and send the updates (what the thread does)."""
        self._deliver(self._decide(request, response))

    def _decide(self, request: bytes | memoryview, response: bytes | memoryview) -> list[ContainerUpdate]:
        try:
            if not can_show_exits(request):
                return []
            exited = exited_containers(response)
            return list(self.release(exited) or ()) if exited else []
        except Exception:  # a malformed answer or a failing hook: logged and counted, the next relist tries again
            log.exception("reading a ListContainers answer for exited containers failed")
            self.metrics.policy_error(LISTING_METHOD, "exits")
            return []

    def _deliver(self, updates: list[ContainerUpdate]) -> None:
        if updates:
            self.apply_updates(updates, LISTING_METHOD)  # logs and counts its own failures

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._waiting is None and not self._outbox and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                waiting, self._waiting = self._waiting, None
                updates, self._outbox = self._outbox, []
                self._reading = waiting is not None
            try:
                if waiting is not None:
                    updates += self._decide(*waiting)
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()
            self._deliver(updates)
