"""The Plugin service over the hook contract: events in, adjustments and updates out, always within budget."""

from __future__ import annotations

import threading

import pytest
from google.protobuf.message import Message

from resmgr.nri import api_pb2 as nri
from resmgr.nri.plugin import EVENT_MASK, PLUGIN_SERVICE, NriPlugin, UnknownMethod
from resmgr.relay.cri import api_pb2 as cri
from resmgr.relay.hooks import ContainerUpdate, HookResult, NoopHook
from resmgr.relay.metrics import RelayMetrics


class PinningHook(NoopHook):
    """Pins every created container to CPU 3 and moves container 'other' to CPU 0; records the calls."""

    def __init__(self, delay: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, str, Message]] = []
        self.delay = delay

    def before(self, method: str, request: Message) -> HookResult:
        self.calls.append(("before", method, request))
        if method != "CreateContainer":
            return HookResult()
        if self.delay is not None:
            self.delay.wait(5)
        decided = cri.CreateContainerRequest()
        decided.CopyFrom(request)
        decided.config.linux.resources.cpuset_cpus = "3"
        return HookResult(request=decided, updates=[ContainerUpdate("other", cpuset_cpus="0")], call="token")

    def after(self, method: str, request: Message, response: Message, call: object = None) -> list[ContainerUpdate]:
        self.calls.append(("after", method, response))
        assert call == ("token" if method == "CreateContainer" else None)
        return []


def _create() -> nri.CreateContainerRequest:
    request = nri.CreateContainerRequest(pod=nri.PodSandbox(id="p", name="pod", namespace="ns"),
                                         container=nri.Container(id="c1", pod_sandbox_id="p", name="main"))
    return request


def test_configure_subscribes_to_the_events_the_manager_needs() -> None:
    plugin = NriPlugin(NoopHook(), RelayMetrics(), lambda u, r: None)
    answer = nri.ConfigureResponse.FromString(plugin.serve(PLUGIN_SERVICE, "Configure",
                                                           nri.ConfigureRequest(request_timeout=2000)
                                                           .SerializeToString()))
    assert answer.events == EVENT_MASK
    for event in ("CREATE_CONTAINER", "UPDATE_CONTAINER", "STOP_CONTAINER", "REMOVE_CONTAINER", "RUN_POD_SANDBOX"):
        assert EVENT_MASK & (1 << (nri.Event.Value(event) - 1)), event
    assert plugin.budget == 1.0


def test_create_container_answers_with_the_adjustment_and_other_updates() -> None:
    hook = PinningHook()
    plugin = NriPlugin(hook, RelayMetrics(), lambda u, r: None)
    answer = nri.CreateContainerResponse.FromString(
        plugin.serve(PLUGIN_SERVICE, "CreateContainer", _create().SerializeToString()))
    assert answer.adjust.linux.resources.cpu.cpus == "3"
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in answer.update] == [("other", "0")]
    assert [(phase, m) for phase, m, _ in hook.calls] == [("before", "CreateContainer"), ("after", "CreateContainer")]
    assert hook.calls[1][2].container_id == "c1"


def test_a_slow_decision_is_answered_at_the_budget_and_sent_later() -> None:
    release = threading.Event()
    sent: list[tuple[list[ContainerUpdate], str]] = []
    done = threading.Event()

    def send_late(updates: list[ContainerUpdate], reason: str) -> None:
        sent.append((updates, reason))
        done.set()

    plugin = NriPlugin(PinningHook(delay=release), RelayMetrics(), send_late)
    plugin.budget = 0.05
    answer = nri.CreateContainerResponse.FromString(
        plugin.serve(PLUGIN_SERVICE, "CreateContainer", _create().SerializeToString()))
    assert answer == nri.CreateContainerResponse()  # no adjustment: the decision was not ready
    release.set()
    assert done.wait(5)
    (updates, reason), = sent
    assert reason == "CreateContainer"
    assert [(u.container_id, u.cpuset_cpus) for u in updates] == [("c1", "3"), ("other", "0")]
    plugin.close()


def test_a_failing_hook_leaves_the_event_unchanged() -> None:
    class Broken(NoopHook):
        def before(self, method: str, request: Message) -> HookResult:
            raise RuntimeError("policy bug")

    plugin = NriPlugin(Broken(), RelayMetrics(), lambda u, r: None)
    answer = plugin.serve(PLUGIN_SERVICE, "CreateContainer", _create().SerializeToString())
    assert nri.CreateContainerResponse.FromString(answer) == nri.CreateContainerResponse()


def test_synchronize_collects_parts_until_the_last() -> None:
    seen: list[tuple[int, int]] = []

    class Syncing(NoopHook):
        def sync_with_runtime(self, pods, containers, resources=None, since=None):  # type: ignore[override]
            seen.append((len(pods), len(containers)))
            return [ContainerUpdate("c1", cpuset_cpus="1")]

    plugin = NriPlugin(Syncing(), RelayMetrics(), lambda u, r: None)
    part = nri.SynchronizeRequest(pods=[nri.PodSandbox(id="p")], more=True)
    assert nri.SynchronizeResponse.FromString(plugin.serve(PLUGIN_SERVICE, "Synchronize",
                                                           part.SerializeToString())).more
    last = nri.SynchronizeRequest(containers=[nri.Container(id="c1", pod_sandbox_id="p")])
    answer = nri.SynchronizeResponse.FromString(plugin.serve(PLUGIN_SERVICE, "Synchronize", last.SerializeToString()))
    assert seen == [(1, 1)] and [u.container_id for u in answer.update] == ["c1"]


def test_unknown_methods_and_services_are_refused() -> None:
    plugin = NriPlugin(NoopHook(), RelayMetrics(), lambda u, r: None)
    with pytest.raises(UnknownMethod):
        plugin.serve(PLUGIN_SERVICE, "NoSuchMethod", b"")
    with pytest.raises(UnknownMethod):
        plugin.serve("other.Service", "Configure", b"")


def test_updates_of_events_without_an_update_field_are_sent_after_the_answer() -> None:
    """containerd holds its NRI lock during an event, and UpdateContainers takes the same lock: an update
    sent before the event is answered would wait for the answer, and the event would time out."""
    answered = threading.Event()
    seen: list[bool] = []
    sent = threading.Event()

    class Releasing(NoopHook):
        def after(self, method: str, request: Message, response: Message, call: object = None):  # type: ignore[override]
            return [ContainerUpdate("other", cpuset_cpus="0-1")]

    def send_late(updates: list[ContainerUpdate], reason: str) -> None:
        seen.append(answered.wait(2))
        sent.set()

    plugin = NriPlugin(Releasing(), RelayMetrics(), send_late)
    request = nri.RemoveContainerRequest(pod=nri.PodSandbox(id="p"), container=nri.Container(id="c1"))
    plugin.serve(PLUGIN_SERVICE, "RemoveContainer", request.SerializeToString())
    answered.set()
    assert sent.wait(5) and seen == [True]
    plugin.close()


def test_events_are_counted_like_relayed_requests() -> None:
    metrics = RelayMetrics()
    plugin = NriPlugin(PinningHook(), metrics, lambda u, r: None)
    plugin.serve(PLUGIN_SERVICE, "CreateContainer", _create().SerializeToString())
    with pytest.raises(UnknownMethod):
        plugin.serve(PLUGIN_SERVICE, "NoSuchMethod", b"")
    get = metrics.registry.get_sample_value
    assert get("cri_resmgr_requests_total", {"method": "nri/CreateContainer", "code": "OK"}) == 1
    assert get("cri_resmgr_requests_total", {"method": "nri/unknown", "code": "UNIMPLEMENTED"}) == 1
    assert get("cri_resmgr_request_duration_seconds_count", {"method": "nri/CreateContainer"}) == 1


def test_a_new_connection_drops_the_parts_of_an_unfinished_synchronize() -> None:
    seen: list[list[str]] = []

    class Syncing(NoopHook):
        def sync_with_runtime(self, pods, containers, resources=None, since=None):  # type: ignore[override]
            seen.append([p.id for p in pods])
            return []

    plugin = NriPlugin(Syncing(), RelayMetrics(), lambda u, r: None)
    stale = nri.SynchronizeRequest(pods=[nri.PodSandbox(id="gone")], more=True)
    plugin.serve(PLUGIN_SERVICE, "Synchronize", stale.SerializeToString())
    plugin.connected()  # the connection broke mid-way; containerd synchronizes the new one from the start
    plugin.serve(PLUGIN_SERVICE, "Synchronize", nri.SynchronizeRequest(pods=[nri.PodSandbox(id="p")])
                 .SerializeToString())
    assert seen == [["p"]]
