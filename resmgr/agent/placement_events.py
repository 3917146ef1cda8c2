"""Placement Events: where cri-resmgr's policy placed each container and why, as Kubernetes Events on its pod.

The agent polls cri-resmgr's GetPlacements (the Config API) and posts an Event (``CPUsPinned`` or ``NotPinned``)
for a container when its placement is new or changed: once per pod container per decision, so a crash-looping
container (a new runtime id at every restart, the same decision) posts once. A global token bucket bounds the rate
at which Events reach the API server whatever the node does; what the bucket holds back is posted at a later poll.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from resmgr.model.explanation import NO_BALLOON, NO_FREE_CPUS, Explanation

log = logging.getLogger("resmgr.agent.placement_events")

COMPONENT = "cri-resmgr"
# The policy wanted CPUs of its own for these and could not give them: worth a Warning.
WARNING_REASONS = frozenset({NO_FREE_CPUS, NO_BALLOON})


class TokenBucket:
    """At most ``burst`` at once, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


def event_body(e: Explanation, node: str, now: datetime | None = None) -> client.CoreV1Event:
    """The Event on ``e``'s pod (involvedObject: the pod, fieldPath: the container)."""
    now = now or datetime.now(UTC)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"{e.pod}.{uuid.uuid4().hex[:16]}", namespace=e.namespace),
        involved_object=client.V1ObjectReference(api_version="v1", kind="Pod", namespace=e.namespace, name=e.pod,
                                                 uid=e.pod_uid or None, field_path=f"spec.containers{{{e.container}}}"),
        reason=e.event_reason, message=e.message()[:1024],
        type="Warning" if e.unpinned in WARNING_REASONS else "Normal",
        source=client.V1EventSource(component=COMPONENT, host=node),
        reporting_component=COMPONENT, reporting_instance=node,
        first_timestamp=now, last_timestamp=now, count=1)


PodContainer = tuple[str, str, str, str]  # namespace, pod, pod uid, container name


class PlacementEvents:
    """Polls ``source`` every ``period`` seconds and posts the changed placements through ``post``."""

    def __init__(self, source: Callable[[], list[Explanation]], post: Callable[[Explanation], None], *,
                 period: float = 10.0, bucket: TokenBucket | None = None, forget_after: float = 900.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.post = post
        self.period = period
        self.bucket = bucket or TokenBucket(rate=1.0, burst=20, clock=clock)
        # Kept while the container is away, up to ``forget_after`` (beyond kubelet's 5-minute crash-loop
        # back-off): a restarted container with the same decision posts nothing new.
        self.forget_after = forget_after
        self.clock = clock
        self.posted: dict[PodContainer, tuple[str, ...]] = {}  # what the last Event said, per pod container
        self._seen: dict[PodContainer, float] = {}
        self.held_back = 0  # Events the bucket held back (posted at a later poll)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> int:
        """Post what changed since the last poll; returns how many Events were posted."""
        current = self.source()
        now = self.clock()
        posted = 0
        for e in current:
            key: PodContainer = (e.namespace, e.pod, e.pod_uid, e.container)
            self._seen[key] = now
            if self.posted.get(key) == e.key():
                continue
            if not self.bucket.take():
                self.held_back += 1
                continue
            try:
                self.post(e)
            except ApiException as exc:
                log.warning("cannot post the placement Event of %s/%s/%s: HTTP %s %s", e.namespace, e.pod,
                            e.container, exc.status, exc.reason)
                if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                    self.posted[key] = e.key()  # refused for good (namespace gone, forbidden): do not retry
                continue
            self.posted[key] = e.key()
            posted += 1
        for key in [k for k, at in self._seen.items() if now - at > self.forget_after]:
            del self._seen[key]  # gone for long enough: its pod is not coming back
            self.posted.pop(key, None)
        return posted

    def start(self) -> PlacementEvents:
        self._thread = threading.Thread(target=self._run, name="placement-events", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.poll_once()
            except Exception as exc:  # cri-resmgr restarting, say: the next poll tries again
                log.debug("placements not read: %s", exc)


def kube_poster(api: client.ApiClient, node: str) -> Callable[[Explanation], None]:
    """Post an explanation as a core/v1 Event in its pod's namespace."""
    core = client.CoreV1Api(api)
    return lambda e: core.create_namespaced_event(e.namespace, event_body(e, node))
