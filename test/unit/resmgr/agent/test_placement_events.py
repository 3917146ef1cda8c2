"""The agent's placement Events: one per pod container per decision, a global token bucket, the Event's fields,
and GetPlacements over the real config socket (cri-resmgr's server, the agent's client)."""

from __future__ import annotations

import os
import tempfile

from kubernetes.client.rest import ApiException
from unit.resmgr.configplane.applier_helpers import RecordingApplier

from resmgr.agent.placement_events import PlacementEvents, TokenBucket, event_body
from resmgr.agent.target import ConfigSocketTarget
from resmgr.configplane.plane import ConfigPlane
from resmgr.configplane.server import serve_config
from resmgr.model.explanation import FRACTIONAL_CPU, NO_FREE_CPUS, Explanation


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def expl(pod: str = "web-0", cid: str = "c1", cpus: str = "2-3", unpinned: str = "", **kw: str) -> Explanation:
    fields = {"namespace": "prod", "pod": pod, "pod_uid": f"uid-{pod}", "container": "app", "container_id": cid,
              "cpus": cpus, "mems": "0", "pool": "socket0", "unpinned": unpinned,
              "detail": "" if unpinned else "exclusive CPUs"}
    return Explanation(**{**fields, **kw})


class Source:
    def __init__(self, *items: Explanation) -> None:
        self.items = list(items)

    def __call__(self) -> list[Explanation]:
        return list(self.items)


def poller(source: Source, clock: Clock, *, rate: float = 1.0, burst: int = 20,
           fail: ApiException | None = None) -> tuple[PlacementEvents, list[Explanation]]:
    posted: list[Explanation] = []

    def post(e: Explanation) -> None:
        if fail is not None:
            raise fail
        posted.append(e)

    return PlacementEvents(source, post, bucket=TokenBucket(rate, burst, clock), clock=clock), posted


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=0.5, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 1.0
    assert not bucket.take()
    clock.now += 1.0
    assert bucket.take() and not bucket.take()
    clock.now += 3600
    assert sum(bucket.take() for _ in range(10)) == 3


def test_one_event_per_decision_and_again_when_it_changes() -> None:
    clock = Clock()
    source = Source(expl())
    events, posted = poller(source, clock)
    assert events.poll_once() == 1 and events.poll_once() == 0
    source.items = [expl(cpus="4-5")]
    assert events.poll_once() == 1
    assert [e.cpus for e in posted] == ["2-3", "4-5"]


def test_a_crash_looping_container_posts_once() -> None:
    clock = Clock()
    source = Source(expl(cid="c1", unpinned=FRACTIONAL_CPU, cpus="0-7"))
    events, posted = poller(source, clock)
    for restart in range(2, 30):
        events.poll_once()
        source.items = []  # exited: released, not in the policy's placements
        clock.now += 10
        events.poll_once()
        source.items = [expl(cid=f"c{restart}", unpinned=FRACTIONAL_CPU, cpus="0-7")]  # created again, same decision
        clock.now += 10
    events.poll_once()
    assert len(posted) == 1


def test_the_bucket_holds_back_and_posts_later() -> None:
    clock = Clock()
    source = Source(*[expl(pod=f"p{i}", cid=f"c{i}") for i in range(10)])
    events, posted = poller(source, clock, rate=1.0, burst=3)
    assert events.poll_once() == 3 and events.held_back == 7
    assert events.poll_once() == 0
    clock.now += 2
    assert events.poll_once() == 2
    clock.now += 100
    assert events.poll_once() == 3  # the burst is the most at once
    clock.now += 100
    events.poll_once()
    assert sorted(e.pod for e in posted) == sorted(f"p{i}" for i in range(10))


def test_refused_for_good_is_not_retried_but_a_server_error_is() -> None:
    clock = Clock()
    events, _ = poller(Source(expl()), clock, fail=ApiException(status=403, reason="Forbidden"))
    events.poll_once()
    assert events.posted  # recorded: a 403 will not change by retrying every period
    events, _ = poller(Source(expl()), clock, fail=ApiException(status=500, reason="Internal"))
    events.poll_once()
    assert not events.posted


def test_event_body_names_the_pod_and_says_why() -> None:
    pinned = event_body(expl(), "worker-1")
    assert pinned.reason == "CPUsPinned" and pinned.type == "Normal"
    assert pinned.involved_object.kind == "Pod" and pinned.involved_object.name == "web-0"
    assert pinned.involved_object.namespace == "prod" and pinned.involved_object.uid == "uid-web-0"
    assert pinned.involved_object.field_path == "spec.containers{app}"
    assert pinned.metadata.namespace == "prod" and pinned.metadata.name.startswith("web-0.")
    assert "cpuset 2-3" in pinned.message and "memory nodes 0" in pinned.message and "pool socket0" in pinned.message
    unpinned = event_body(expl(unpinned=NO_FREE_CPUS, cpus="0-7"), "worker-1")
    assert unpinned.reason == "NotPinned" and unpinned.type == "Warning"
    assert "not pinned: not-enough-free-cpus" in unpinned.message
    assert event_body(expl(unpinned=FRACTIONAL_CPU), "w").type == "Normal"


def test_get_placements_over_the_config_socket() -> None:
    sock = os.path.join(tempfile.mkdtemp(prefix="agent-", dir="/tmp"), "config.sock")
    applier = RecordingApplier()
    applier.explanations = [expl(), expl(pod="be-0", cid="c2", unpinned="not-guaranteed", cpus="0-7", mems="")]
    server = serve_config(ConfigPlane(applier, node_name="n"), sock)
    target = ConfigSocketTarget(sock, timeout=10)
    try:
        assert target.get_placements() == applier.explanations
    finally:
        target.close()
        server.stop(grace=0)
