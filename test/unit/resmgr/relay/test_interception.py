"""The interception rules: hook errors and undecodable messages never change or fail a request.

``forward`` here is the function the server passes in (it sends bytes to the runtime); the
end-to-end path against real containerd is covered in test/integration/relay.
"""

from __future__ import annotations

import threading

import pytest
from cri_api.v1 import api_pb2
from fixtures.hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from resmgr.relay.hooks import INTERCEPTED_METHODS, ContainerUpdate, HookResult, NoopHook
from resmgr.relay.interception import Interceptor
from resmgr.relay.methods import RUNTIME_SERVICE, cri_methods
from resmgr.relay.metrics import RelayMetrics

CREATE = cri_methods()[f"/{RUNTIME_SERVICE}/CreateContainer"]


def create_request(cpus: str = "") -> api_pb2.CreateContainerRequest:
    req = api_pb2.CreateContainerRequest(pod_sandbox_id="pod1")
    req.config.metadata.name = "c"
    req.config.linux.resources.cpuset_cpus = cpus
    return req


RESPONSE = api_pb2.CreateContainerResponse(container_id="cid").SerializeToString()


class Recorder:
    def __init__(self, response: bytes = RESPONSE, error: Exception | None = None) -> None:
        self.sent: list[bytes] = []
        self.updates: list[api_pb2.UpdateContainerResourcesRequest] = []
        self.response, self.error = response, error

    def forward(self, raw: bytes) -> bytes:
        self.sent.append(raw)
        if self.error:
            raise self.error
        return self.response

    def send_update(self, raw: bytes) -> None:
        self.updates.append(api_pb2.UpdateContainerResourcesRequest.FromString(raw))


def counter(metrics: RelayMetrics, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


class PinningHook(NoopHook):
    """Pins new containers to CPU 3 and shrinks container 'other' when one is created."""

    def __init__(self) -> None:
        self.after_calls: list[tuple[str, object]] = []

    def before(self, method, request):
        new = type(request)()
        new.CopyFrom(request)
        new.config.linux.resources.cpuset_cpus = "3"
        return HookResult(request=new, updates=[ContainerUpdate("other", cpuset_cpus="0-2", reason="make room")])

    def after(self, method, request, response):
        self.after_calls.append((method, response.container_id))
        return [ContainerUpdate("other2", cpuset_mems="0")]


def test_hook_can_change_the_request_and_update_other_containers():
    rec, metrics, hook = Recorder(), RelayMetrics(), PinningHook()
    response = Interceptor(hook, metrics, rec.send_update).handle(CREATE, create_request().SerializeToString(),
                                                                  rec.forward)
    assert response == RESPONSE
    assert api_pb2.CreateContainerRequest.FromString(rec.sent[0]).config.linux.resources.cpuset_cpus == "3"
    assert [(u.container_id, u.linux.cpuset_cpus, u.linux.cpuset_mems) for u in rec.updates] == [
        ("other", "0-2", ""), ("other2", "", "0")]
    assert hook.after_calls == [("CreateContainer", "cid")]
    assert counter(metrics, "cri_resmgr_container_updates_total", {"result": "ok"}) == 2


def test_undecodable_request_passes_through_unchanged_and_is_counted():
    rec, metrics = Recorder(), RelayMetrics()
    hook = PinningHook()
    garbage = b"\x0a\xff\xff\xff\xff"  # a length-delimited field running past the end
    assert Interceptor(hook, metrics, rec.send_update).handle(CREATE, garbage, rec.forward) == RESPONSE
    assert rec.sent == [garbage] and rec.updates == [] and hook.after_calls == []
    assert counter(metrics, "cri_resmgr_relay_errors_total",
                   {"method": "CreateContainer", "kind": "undecodable_request"}) == 1


class FailingHook(NoopHook):
    def __init__(self, phase: str) -> None:
        self.phase = phase

    def before(self, method, request):
        if self.phase == "before":
            raise RuntimeError("policy bug")
        if self.phase == "bad-type":
            return HookResult(request=api_pb2.VersionRequest())
        if self.phase == "bad-result":
            return "nonsense"
        return HookResult(updates=[ContainerUpdate(""), "junk"]) if self.phase == "bad-updates" else HookResult()

    def after(self, method, request, response):
        if self.phase == "after":
            raise RuntimeError("policy bug after")
        return []


@pytest.mark.parametrize("phase, label", [("before", "before"), ("after", "after"), ("bad-type", "encode"),
                                          ("bad-result", "before"), ("bad-updates", "updates")])
def test_hook_failures_forward_the_original_bytes(phase, label, caplog):
    rec, metrics = Recorder(), RelayMetrics()
    raw = create_request("1").SerializeToString()
    assert Interceptor(FailingHook(phase), metrics, rec.send_update).handle(CREATE, raw, rec.forward) == RESPONSE
    assert rec.sent == [raw] and rec.updates == []
    assert counter(metrics, "cri_resmgr_policy_errors_total", {"method": "CreateContainer", "phase": label}) >= 1
    assert any(r.levelname == "ERROR" for r in caplog.records)


def test_runtime_errors_propagate_and_skip_after():
    hook = PinningHook()
    rec = Recorder(error=LookupError("runtime said no"))
    with pytest.raises(LookupError):
        Interceptor(hook, RelayMetrics(), rec.send_update).handle(CREATE, create_request().SerializeToString(),
                                                                  rec.forward)
    assert hook.after_calls == []


def test_failed_container_update_is_logged_not_raised(caplog):
    def broken_update(raw: bytes) -> None:
        raise OSError("runtime gone")
    metrics = RelayMetrics()
    rec = Recorder()
    Interceptor(PinningHook(), metrics, broken_update).handle(CREATE, create_request().SerializeToString(),
                                                              rec.forward)
    assert counter(metrics, "cri_resmgr_container_updates_total", {"result": "error"}) == 2
    assert "container update failed" in caplog.text


def test_a_call_waiting_for_the_runtime_blocks_no_other_call():
    """A StopContainer that takes its whole grace period: other calls go through meanwhile."""
    stop = cri_methods()[f"/{RUNTIME_SERVICE}/StopContainer"]
    release, entered = threading.Event(), threading.Event()

    def slow_forward(raw: bytes) -> bytes:
        entered.set()
        assert release.wait(60), "the slow call was never released"
        return b""

    interceptor = Interceptor(NoopHook(), RelayMetrics(), lambda raw: None)
    stopping = threading.Thread(target=interceptor.handle,
                                args=(stop, api_pb2.StopContainerRequest(container_id="x").SerializeToString(),
                                      slow_forward))
    stopping.start()
    try:
        assert entered.wait(60)
        # The stop is still in the runtime; a create goes all the way through.
        assert interceptor.handle(CREATE, create_request().SerializeToString(), lambda b: RESPONSE) == RESPONSE
        assert stopping.is_alive()
    finally:
        release.set()
        stopping.join()


class ReservingHook(NoopHook):
    """Hands out a call handle and records what comes back to it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def before(self, method, request):
        return HookResult(call=("handle", method))

    def after(self, method, request, response, call=None):
        self.seen.append(("after", call))
        return [ContainerUpdate("other", cpuset_cpus="1", seq=2)]

    def failed(self, method, request, call=None):
        self.seen.append(("failed", call))
        return [ContainerUpdate("other", cpuset_cpus="0-1", seq=3)]


def test_the_call_handle_comes_back_to_after_or_failed():
    rec, hook = Recorder(), ReservingHook()
    Interceptor(hook, RelayMetrics(), rec.send_update).handle(CREATE, create_request().SerializeToString(),
                                                              rec.forward)
    failing = Recorder(error=LookupError("runtime said no"))
    with pytest.raises(LookupError):
        Interceptor(hook, RelayMetrics(), failing.send_update).handle(
            CREATE, create_request().SerializeToString(), failing.forward)
    assert hook.seen == [("after", ("handle", "CreateContainer")), ("failed", ("handle", "CreateContainer"))]
    assert [u.linux.cpuset_cpus for u in rec.updates] == ["1"]
    assert [u.linux.cpuset_cpus for u in failing.updates] == ["0-1"]


def test_an_undecodable_response_gives_the_reservation_back():
    hook = ReservingHook()
    rec = Recorder(response=b"\x0a\xff\xff\xff\xff")
    Interceptor(hook, RelayMetrics(), rec.send_update).handle(CREATE, create_request().SerializeToString(),
                                                              rec.forward)
    assert hook.seen == [("failed", ("handle", "CreateContainer"))]


def test_an_older_decision_never_lands_after_a_newer_one():
    rec = Recorder()
    interceptor = Interceptor(NoopHook(), RelayMetrics(), rec.send_update)
    interceptor.apply_updates([ContainerUpdate("a", cpuset_cpus="2-3", seq=7)], "test")
    interceptor.apply_updates([ContainerUpdate("a", cpuset_cpus="0-3", seq=5)], "test")  # late, stale
    interceptor.apply_updates([ContainerUpdate("b", cpuset_cpus="1", seq=5)], "test")  # another container
    assert [(u.container_id, u.linux.cpuset_cpus) for u in rec.updates] == [("a", "2-3"), ("b", "1")]


@settings(max_examples=examples(300), deadline=None)
@given(method=st.sampled_from(INTERCEPTED_METHODS), raw=st.binary(max_size=256),
       response=st.binary(max_size=64), behaviour=st.sampled_from(["noop", "before", "after", "bad-type",
                                                                   "bad-result", "bad-updates", "pin"]))
def test_fuzz_decode_and_hook_path_never_fails_the_call(method, raw, response, behaviour):
    cri_method = cri_methods()[f"/{RUNTIME_SERVICE}/{method}"]
    hook = {"noop": NoopHook(), "pin": PinningHook()}.get(behaviour) or FailingHook(behaviour)
    rec = Recorder(response=response)
    out = Interceptor(hook, RelayMetrics(), rec.send_update).handle(cri_method, raw, rec.forward)
    assert out == response
    assert len(rec.sent) == 1
    if behaviour != "pin":
        # Nobody rewrote the request, so the runtime got exactly the caller's bytes.
        assert rec.sent[0] == raw


def test_exits_handed_over_are_settled_before_a_create_is_decided() -> None:
    """kubelet creates a pod's app container once its relist showed the init container exited: the relay
    finishes reading the ListContainers answers it handed over (resmgr.relay.exits) before the decision."""
    order: list[str] = []

    class Hook(NoopHook):
        def before(self, method, request):
            order.append(f"before {method}")
            return HookResult()

    rec = Recorder()
    interceptor = Interceptor(Hook(), RelayMetrics(), rec.send_update, settle_exits=lambda: order.append("settle"))
    interceptor.handle(CREATE, create_request().SerializeToString(), rec.forward)
    stop = cri_methods()[f"/{RUNTIME_SERVICE}/StopContainer"]
    interceptor.handle(stop, api_pb2.StopContainerRequest(container_id="x").SerializeToString(),
                       lambda raw: api_pb2.StopContainerResponse().SerializeToString())
    assert order == ["settle", "before CreateContainer", "before StopContainer"]
