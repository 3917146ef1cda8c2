"""The exit watcher: exited containers read from ListContainers answers, handed to the hook off the reply path."""

from __future__ import annotations

import threading

from cri_api.v1 import api_pb2

from resmgr.relay.exits import ExitWatcher, can_show_exits, exited_containers
from resmgr.relay.hooks import ContainerUpdate
from resmgr.relay.metrics import RelayMetrics

RUNNING, EXITED, CREATED = api_pb2.CONTAINER_RUNNING, api_pb2.CONTAINER_EXITED, api_pb2.CONTAINER_CREATED


def listing(states: dict[str, int]) -> bytes:
    """A ListContainersResponse as containerd answers kubelet: labels, annotations, metadata and all."""
    response = api_pb2.ListContainersResponse()
    for i, (cid, state) in enumerate(states.items()):
        c = response.containers.add(id=cid, pod_sandbox_id=f"pod-{i}", state=state, image_ref="sha256:" + "b" * 64,
                                    created_at=1_700_000_000_000_000_000 + i)
        c.metadata.name, c.metadata.attempt = f"c{i}", 2
        c.image.image = "sha256:" + "a" * 64
        c.labels.update({"io.kubernetes.container.name": f"c{i}", "io.kubernetes.pod.name": f"p{i}"})
        c.annotations.update({"io.kubernetes.container.restartCount": "2", "io.kubernetes.container.hash": "abc"})
    return response.SerializeToString()


def request(**filter_fields: object) -> bytes:
    req = api_pb2.ListContainersRequest()
    if "state" in filter_fields:
        req.filter.state.state = filter_fields.pop("state")  # type: ignore[assignment]
    for key, value in filter_fields.items():
        setattr(req.filter, key, value)
    return req.SerializeToString()


def test_exited_containers_are_read_from_a_full_answer() -> None:
    raw = listing({"a": RUNNING, "b": EXITED, "c": CREATED, "d": EXITED})
    assert exited_containers(raw) == ["b", "d"]
    assert exited_containers(memoryview(b"\0" + raw)[1:]) == ["b", "d"]  # a view into the relay's buffer
    assert exited_containers(b"") == []


def test_only_listings_that_can_show_exits_are_read() -> None:
    assert can_show_exits(b"")  # no filter: kubelet's relist
    assert can_show_exits(request())  # an empty filter (what kubelet's PLEG sends)
    assert can_show_exits(request(pod_sandbox_id="p"))
    assert can_show_exits(request(state=EXITED))
    assert not can_show_exits(request(state=RUNNING))  # kubelet's listing of running containers


class Recorder:
    def __init__(self, updates: list[ContainerUpdate] | None = None) -> None:
        self.handed: list[list[str]] = []
        self.applied: list[tuple[list[ContainerUpdate], str]] = []
        self.updates = updates or []

    def release(self, ids):
        self.handed.append(list(ids))
        return self.updates

    def apply(self, updates, method):
        self.applied.append((list(updates), method))


def test_observe_hands_exits_over_and_sends_the_updates() -> None:
    update = ContainerUpdate("a", cpuset_cpus="0-1", reason="container exited")
    rec = Recorder([update])
    watcher = ExitWatcher(rec.release, rec.apply, RelayMetrics())
    watcher.observe(request(), listing({"a": RUNNING, "b": EXITED}))
    assert rec.handed == [["b"]] and rec.applied == [([update], "ListContainers")]
    watcher.observe(request(state=RUNNING), listing({"a": RUNNING}))
    watcher.observe(request(), listing({"a": RUNNING}))
    assert rec.handed == [["b"]], "a listing without exits is not handed over"


def test_the_thread_reads_the_newest_answer_and_survives_a_failing_hook() -> None:
    """While the watcher is busy, newer answers replace the waiting one; a hook that raises is counted."""
    busy, go = threading.Event(), threading.Event()
    handed: list[list[str]] = []
    done = threading.Event()

    def release(ids):
        handed.append(list(ids))
        if len(handed) == 1:
            busy.set()
            go.wait(10)
            raise RuntimeError("hook failed")
        done.set()
        return []

    metrics = RelayMetrics()
    watcher = ExitWatcher(release, lambda updates, method: None, metrics)
    watcher.start()
    try:
        watcher.offer(request(), listing({"first": EXITED}))
        assert busy.wait(10)
        watcher.offer(request(), listing({"second": EXITED}))
        watcher.offer(request(), listing({"third": EXITED}))
        go.set()
        assert done.wait(10)
        assert handed == [["first"], ["third"]]
        assert metrics.registry.get_sample_value("cri_resmgr_policy_errors_total",
                                                 {"method": "ListContainers", "phase": "exits"}) == 1
    finally:
        go.set()
        watcher.close()


def test_settle_reads_what_was_handed_over_before_it_returns() -> None:
    """An answer still waiting is read in the caller's thread; one being read is waited for. The updates the
    release asks for are sent by the watcher's thread: a CreateContainer never waits for those runtime calls."""
    update = ContainerUpdate("be", cpuset_cpus="0-1", reason="container exited")
    rec = Recorder([update])
    sent = threading.Event()
    senders: list[str] = []

    def apply(updates, method):
        rec.apply(updates, method)
        senders.append(threading.current_thread().name)
        sent.set()

    watcher = ExitWatcher(rec.release, apply, RelayMetrics())  # no thread yet: nothing reads on its own
    watcher.offer(request(), listing({"a": EXITED}))
    watcher.settle()
    assert rec.handed == [["a"]] and rec.applied == []
    watcher.settle()
    assert rec.handed == [["a"]], "an answer is read once"
    watcher.start()
    try:
        assert sent.wait(10)
        assert rec.applied == [([update], "ListContainers")] and senders == ["exit-watcher"]
    finally:
        watcher.close()

    events: list[str] = []
    busy, go = threading.Event(), threading.Event()

    def slow_release(ids):
        busy.set()
        go.wait(10)
        events.append("released")
        return []

    watcher = ExitWatcher(slow_release, rec.apply, RelayMetrics())
    watcher.start()
    try:
        watcher.offer(request(), listing({"b": EXITED}))
        assert busy.wait(10)
        settler = threading.Thread(target=lambda: (watcher.settle(), events.append("settled")))
        settler.start()
        go.set()
        settler.join(10)
        assert events == ["released", "settled"]
    finally:
        go.set()
        watcher.close()


def test_the_cut_down_listing_type_reads_cri_s_field_numbers() -> None:
    """The descriptor written out in exits.py is the one its comment describes, with CRI's field numbers."""
    from google.protobuf import descriptor_pb2

    from resmgr.relay.exits import LISTING_DESCRIPTOR

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="resmgr/relay/exits_listing.proto", package="resmgr.exits",
                                               syntax="proto3")
    listed = proto.message_type.add(name="Listed")
    container = api_pb2.Container.DESCRIPTOR
    for name, kind in (("id", f.TYPE_STRING), ("state", f.TYPE_INT32)):
        listed.field.add(name=name, number=container.fields_by_name[name].number, type=kind, label=f.LABEL_OPTIONAL)
    listing = proto.message_type.add(name="Listing")
    listing.field.add(name="containers", type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED, type_name=".resmgr.exits.Listed",
                      number=api_pb2.ListContainersResponse.DESCRIPTOR.fields_by_name["containers"].number)
    assert descriptor_pb2.FileDescriptorProto.FromString(LISTING_DESCRIPTOR) == proto
