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
(SyncPod asks for the pod's status first); ``settle``, called before every CreateContainer decision,
then finishes reading what was handed over (at once in the caller's thread if it still waits).

Reading costs about 70 µs per relist of 200 containers (2 cores, upb): the answer is parsed with a
message type of our own that names only the two fields read (``id`` and ``state`` of CRI's
``Container``), so labels, annotations and the rest are skipped, never built.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

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


def _listing_class() -> type[Any]:
    """``ListContainersResponse`` cut down to ``containers[].id`` (field 1) and ``containers[].state`` (field 6).

    The field numbers are CRI's (runtime.v1 api.proto); everything else in the answer is an unknown field
    to this type, which the parser skips without making Python objects for it.
    """
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="resmgr/relay/exits_listing.proto",
                                               package="resmgr.exits", syntax="proto3")
    listed = proto.message_type.add(name="Listed")
    listed.field.add(name="id", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    listed.field.add(name="state", number=6, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    listing = proto.message_type.add(name="Listing")
    listing.field.add(name="containers", number=1, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                      type_name=".resmgr.exits.Listed")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("resmgr.exits.Listing"))


_Listing = _listing_class()


def can_show_exits(request: bytes | memoryview) -> bool:
    """Whether a ListContainers request may be answered with exited containers (a state filter other
    than EXITED cannot: kubelet's every-2-s listing of running containers is not read at all)."""
    parsed = api_pb2.ListContainersRequest.FromString(request)
    return not (parsed.HasField("filter") and parsed.filter.HasField("state")
                and parsed.filter.state.state != _EXITED)


def exited_containers(response: bytes | memoryview) -> list[str]:
    """The ids of the containers a ListContainersResponse lists as exited."""
    return [c.id for c in _Listing.FromString(response).containers if c.state == _EXITED]


class ExitWatcher:
    """Reads ListContainers answers on a thread of its own and hands exited containers to ``release``."""

    def __init__(self, release: Release, apply_updates: ApplyUpdates, metrics: RelayMetrics) -> None:
        self.release = release
        self.apply_updates = apply_updates
        self.metrics = metrics
        self._cond = threading.Condition(threading.Lock())
        self._waiting: tuple[bytes | memoryview, bytes | memoryview] | None = None
        self._reading = False  # the thread is reading an answer
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
        """Finish reading the answers handed over so far (before a CreateContainer is decided)."""
        with self._cond:
            waiting, self._waiting = self._waiting, None
            while self._reading:
                self._cond.wait()
        if waiting is not None:
            self._read(*waiting)

    def observe(self, request: bytes | memoryview, response: bytes | memoryview) -> None:
        """Read one answer and hand its exited containers over (the watcher thread's work; tests call it)."""
        if not can_show_exits(request):
            return
        exited = exited_containers(response)
        if not exited:
            return
        updates = self.release(exited)
        if updates:
            self.apply_updates(updates, LISTING_METHOD)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._waiting is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                request, response = self._waiting  # type: ignore[misc]
                self._waiting = None
                self._reading = True
            try:
                self._read(request, response)
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()

    def _read(self, request: bytes | memoryview, response: bytes | memoryview) -> None:
        try:
            self.observe(request, response)
        except Exception:  # a malformed answer or a failing hook: logged and counted, the next relist tries again
            log.exception("reading a ListContainers answer for exited containers failed")
            self.metrics.policy_error(LISTING_METHOD, "exits")
