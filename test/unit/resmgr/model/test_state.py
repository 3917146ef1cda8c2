"""The one registry of containers (resmgr.model.state.NodeState): lifecycles are explicit, an ended container holds
nothing, and the policy's views are read-only."""

from __future__ import annotations

import pytest

from resmgr.model.resources import ContainerInfo
from resmgr.model.state import Lifecycle, NodeState, StateError


def info(cid: str, milli: int = 0) -> ContainerInfo:
    return ContainerInfo(id=cid, pod_id="p", name=cid, request_milli=milli)


def test_one_record_per_container_with_its_lifecycle_and_placement() -> None:
    s = NodeState()
    s.register("pending-1", info(""), Lifecycle.PENDING)
    s.register("a", info("a"), Lifecycle.RUNNING)
    s.register("b", info("b"), Lifecycle.STOPPED)
    s.place("pending-1", info("", 500))
    s.place("a", info("a", 1000))  # placed as the policy sees it (an Adjustment may differ from its own)
    s.set_grant("a", "grant-a")
    assert list(s.known) == ["a", "b"]  # pending reservations are not known containers yet
    assert dict(s.placed.items()) == {"pending-1": info("", 500), "a": info("a", 1000)}
    assert s.known["a"] == info("a") and s.grants == {"a": "grant-a"}
    assert s.in_lifecycle(Lifecycle.STOPPED, Lifecycle.EXITED) == ["b"]
    assert s.holding_nothing() == ["b"]
    s.rename("pending-1", "c")  # the runtime's id: record, placement and grant move together
    s.set_lifecycle("c", Lifecycle.CREATED)
    assert "pending-1" not in s.placed and s.placed["c"] == info("", 500) and s.lifecycle("c") is Lifecycle.CREATED


def test_an_ended_container_can_hold_nothing() -> None:
    s = NodeState()
    s.register("a", info("a"), Lifecycle.RUNNING)
    s.place("a", info("a"))
    s.set_grant("a", "g")
    with pytest.raises(StateError, match="still holds"):
        s.end("a", Lifecycle.EXITED)  # the leak: an exited container keeping its CPUs
    with pytest.raises(StateError, match="still holds"):
        s.forget("a")
    s.take_grant("a")
    s.unplace("a")
    s.end("a", Lifecycle.EXITED)
    assert s.lifecycle("a") is Lifecycle.EXITED and "a" in s.known and "a" not in s.placed
    with pytest.raises(StateError, match="cannot be placed"):
        s.place("a", info("a"))  # nor can a policy place it again
    with pytest.raises(StateError, match="not placed"):
        s.set_grant("a", "g")
    assert s.forget("a") and s.lifecycle("a") is None


def test_the_policy_views_are_read_only_and_a_fork_places_nothing() -> None:
    s = NodeState()
    s.register("a", info("a"), Lifecycle.RUNNING)
    s.place("a", info("a"))
    s.set_grant("a", "g")
    with pytest.raises(TypeError):
        s.grants["a"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        s.placed["a"] = info("a")  # type: ignore[index]
    fork = s.fork()
    assert fork.lifecycle("a") is Lifecycle.RUNNING and "a" not in fork.placed and fork.grants == {}
    fork.place("a", info("a", 2000))
    assert s.placed["a"] == info("a")  # the fork is the new policy's until the manager adopts it
