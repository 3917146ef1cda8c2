"""Placement Events posted by the real agent on the real API server: cri-resmgr's policy (static, on this machine's
two CPUs) pins a Guaranteed container and says why it does not pin the others; each pod gets one Event."""

from __future__ import annotations

import uuid

import pytest
from integration.agent.conftest import wait_for
from kubernetes import client

pytestmark = pytest.mark.integration

# CPU 0 reserved (the shared pool), CPU 1 for one Guaranteed container with one CPU.
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0\n"
ONE_CPU = {"cpu_shares": 1024, "cpu_quota": 100_000, "cpu_period": 100_000, "memory_limit": 64 << 20}


def pod_events(core: client.CoreV1Api, pod: str) -> list[client.CoreV1Event]:
    return core.list_namespaced_event("default", field_selector=f"involvedObject.name={pod}").items


def test_events_say_where_each_container_runs_and_why(plane_node):
    node = plane_node(fallback=STATIC)
    suffix = uuid.uuid4().hex[:6]  # Events outlive the test's pods
    pinned_pod, be_pod, starved_pod = (f"{what}-{suffix}" for what in ("pinned", "besteffort", "starved"))
    node.run_container("app", pod=pinned_pod, qos="guaranteed", **ONE_CPU)
    node.run_container("app", pod=be_pod, cpu_shares=2)

    def one(pod: str) -> client.CoreV1Event | None:
        events = pod_events(node.core, pod)
        return events[0] if len(events) == 1 else None

    try:
        pinned = wait_for(lambda: one(pinned_pod), "the pinned pod's Event")
        unpinned = wait_for(lambda: one(be_pod), "the BestEffort pod's Event")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{node.logs()}") from None
    assert pinned.reason == "CPUsPinned" and pinned.type == "Normal"
    assert "container app: pinned: exclusive CPUs; cpuset 1," in pinned.message and "pool shared" in pinned.message
    ref = pinned.involved_object
    assert (ref.kind, ref.namespace, ref.name, ref.field_path) == ("Pod", "default", pinned_pod, "spec.containers{app}")
    assert pinned.source.component == "cri-resmgr" and pinned.source.host == node.name
    assert unpinned.reason == "NotPinned" and unpinned.type == "Normal"
    assert "not pinned: not-guaranteed; cpuset 0," in unpinned.message

    # No CPU left for a second Guaranteed container: a Warning says so.
    node.run_container("app", pod=starved_pod, qos="guaranteed", **ONE_CPU)
    starved = wait_for(lambda: one(starved_pod), "the starved pod's Event")
    assert starved.reason == "NotPinned" and starved.type == "Warning"
    assert "not pinned: not-enough-free-cpus" in starved.message
    # Polls went by since the first Events: the unchanged decisions posted nothing more.
    assert len(pod_events(node.core, pinned_pod)) == 1 and len(pod_events(node.core, be_pod)) == 1
