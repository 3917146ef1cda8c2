"""AdjustingHook passes every hook call through to the resource manager, reservations included."""

from __future__ import annotations

import threading

import pytest

from resmgr.configplane.hook import AdjustingHook
from resmgr.manager.outbox import UpdateOutbox
from resmgr.relay.hooks import ContainerUpdate


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def after(self, method, request, response, call=None):
        self.calls.append((method, call))
        return []


def test_after_hands_the_reservation_through():
    inner = Recorder()
    hook = AdjustingHook(inner)
    token = object()
    assert hook.after("CreateContainer", object(), object(), token) == []
    assert hook.after("RunPodSandbox", object(), object()) == []
    assert inner.calls == [("CreateContainer", token), ("RunPodSandbox", None)]


class Plane:
    """A config plane whose refresh re-applies an Adjustment: its update goes out through the outbox."""

    def __init__(self, outbox: UpdateOutbox) -> None:
        self.outbox = outbox

    def refresh_adjustments(self) -> None:
        self.outbox([ContainerUpdate("adjusted", "2-3", reason="adjustment")], "SetAdjustment")


class Inner(Recorder):
    def after(self, method, request, response, call=None):
        super().after(method, request, response, call)
        return [ContainerUpdate("own", "1")]


def test_adjustments_made_inside_the_hook_are_its_result_not_sent_back_into_the_relay():
    sent: list[tuple[str, list[ContainerUpdate]]] = []
    outbox = UpdateOutbox()
    outbox.bind(lambda updates, reason: sent.append((reason, updates)))
    hook = AdjustingHook(Inner(), outbox=outbox)
    hook.plane = Plane(outbox)
    updates = hook.after("StartContainer", object(), object())
    assert [u.container_id for u in updates] == ["own", "adjusted"]
    assert sent == []  # the relay sends them as this call's result, after the hook returned
    # outside a hook (a config pushed by the agent) the same send goes straight to the relay
    hook.plane.refresh_adjustments()
    assert [(reason, [u.container_id for u in ups]) for reason, ups in sent] == [("SetAdjustment", ["adjusted"])]


def test_held_updates_are_per_thread():
    sent: list[str] = []
    outbox = UpdateOutbox(lambda updates, reason: sent.extend(u.container_id for u in updates))
    with outbox.held() as held:
        worker = threading.Thread(target=outbox, args=([ContainerUpdate("timer")], "ColdStartDone"))
        worker.start()
        worker.join()
        outbox([ContainerUpdate("mine")], "SetAdjustment")
    assert sent == ["timer"] and [u.container_id for u in held] == ["mine"]


def test_the_outbox_binds_once_and_arms_what_waits_for_it():
    outbox = UpdateOutbox()
    armed: list[str] = []
    outbox.when_bound(lambda: armed.append("timers"))
    assert armed == [] and not outbox.bound
    outbox.bind(lambda updates, reason: None)
    assert armed == ["timers"]
    with pytest.raises(RuntimeError):
        outbox.bind(lambda updates, reason: None)
