"""AdjustingHook passes every hook call through to the resource manager, reservations included."""

from __future__ import annotations

from resmgr.configplane.hook import AdjustingHook


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
