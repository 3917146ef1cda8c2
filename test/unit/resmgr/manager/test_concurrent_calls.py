"""Concurrent CRI calls through the resource manager, interleaved by hypothesis.

The relay no longer holds a lock across the runtime call, so a call's decision (``before``)
and its answer (``after`` or ``failed``) can be separated by any number of other calls'
decisions and answers. This machine starts calls and answers them in any order (reserve A,
reserve B, answer B, fail A, ...), sending every container update through the relay's
``UpdateOrder`` to a runtime that applies what it gets. After every step:

* no CPU is exclusive to two owners, pending reservations included;
* a reservation keeps what was decided for it until its call is answered (another call's
  refused resize must not undo it);
* a failed create released its reservation (checked in the rule);
* a container the runtime lists as exited (the relay's exit watcher hands it over) holds nothing, and
  a re-created container (kubelet's restart: a create of the same name in the same pod) takes over from
  its older instance, which holds nothing either;
* what the runtime holds equals the policy's placements, for every created container whose
  own resize is not in flight (the runtime keeps its old cpuset until it answers);
* the cache equals the policy state: whenever no call is in flight, a resource manager restored
  from it places every created container as the live one does (reservations and resizes are
  persisted once the runtime confirmed them);
* when everything is answered and removed, the policy is back to its initial exclusive sets.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cri_api.v1 import api_pb2
from fixtures.hypothesis_profiles import examples
from fixtures.seed_configs import SEED_BALLOONS
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from unit.resmgr.cri_requests import create_request
from unit.resmgr.rm_driver import Driver

from resmgr.manager.placement_diff import PENDING_PREFIX
from resmgr.policy.base import Grant
from resmgr.relay.hooks import ContainerUpdate, HookResult
from resmgr.relay.update_order import UpdateOrder
from resmgr.topology import Topology, parse_cpuset

SCENARIOS = {
    "static-2cpu": ("this-machine", "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"),
    "static-2s": ("2s-2n-16c-2t", "policy:\n  Active: static\n  ReservedResources:\n    cpu: 2\n"),
    "topology-aware-2s": ("2s-2n-16c-2t", "policy:\n  Active: topology-aware\n  ReservedResources:\n"
                                          "    cpu: cpuset:0,64\n"),
    "balloons-seed": ("2s-2n-16c-2t", SEED_BALLOONS),
    "dynamic-pools-2s": ("2s-2n-16c-2t", "policy:\n  Active: dynamic-pools\n  ReservedResources:\n    cpu: 2\n"
                                         "  dynamic-pools:\n    DynamicPoolTypes:\n      - Name: app\n"
                                         "        Namespaces: [default]\n"),
}

QOS = st.sampled_from(["besteffort", "burstable", "guaranteed"])
MILLI = st.sampled_from([0, 250, 1000, 1500, 2000, 4000])


@dataclass
class InFlight:
    """A call whose decision was made and whose answer has not come yet."""

    method: str
    request: Any
    result: HookResult
    cid: str = ""
    grant: Grant | None = None  # what a create reserved


def make_machine(topology: Topology, config_text: str) -> type[RuleBasedStateMachine]:
    class ConcurrentCalls(RuleBasedStateMachine):
        @initialize()
        def setup(self) -> None:
            self.dir = Path(tempfile.mkdtemp(prefix="concurrent-calls-"))
            self.d = Driver(topology, self.dir, config_text)
            self.order = UpdateOrder()
            self.inflight: list[InFlight] = []
            self.pods: list[str] = []
            self.exited: set[str] = set()  # created containers the runtime lists as exited
            self.n = 0
            self.initial = self.d.rm.policy.exclusive_sets()

        def teardown(self) -> None:
            if hasattr(self, "dir"):
                shutil.rmtree(self.dir, ignore_errors=True)

        # -- the relay's side: updates go to the runtime in decision order -----------------------
        def send(self, updates: list[ContainerUpdate]) -> None:
            for u in updates:  # FakeRuntime.apply fails on an update for a container it does not have
                self.order.deliver(u, lambda u: self.d.runtime.apply([u]))

        def begin(self, method: str, request: Any, cid: str = "") -> None:
            result = self.d.rm.before(method, request)
            self.send(result.updates)
            key = getattr(result.call, "key", None)
            grant = self.d.rm.policy.grants.get(key) if key else None
            self.inflight.append(InFlight(method, request, result, cid, grant))

        def busy(self, cid: str) -> bool:
            return any(c.cid == cid for c in self.inflight)

        def resizing(self) -> set[str]:
            return {c.cid for c in self.inflight if c.method == "UpdateContainerResources"}

        # -- rules -------------------------------------------------------------------------------
        @rule(qos=QOS)
        def new_pod(self, qos: str) -> None:
            self.n += 1
            self.pods.append(self.d.run_pod(f"p{self.n}", qos=qos))

        @precondition(lambda self: self.pods)
        @rule(data=st.data(), milli=MILLI)
        def reserve_create(self, data: st.DataObject, milli: int) -> None:
            pod = data.draw(st.sampled_from(self.pods))
            if "besteffort" in self.d.runtime.pods[pod].linux.cgroup_parent:
                milli = 0
            self.n += 1
            self.begin("CreateContainer", create_request(pod, self.d.runtime.pods[pod], f"c{self.n}",
                                                         cpu_milli=milli))

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data(), milli=MILLI)
        def reserve_recreate(self, data: st.DataObject, milli: int) -> None:
            """kubelet restarts a container: a create of the same name in the same pod (its exit seen or not)."""
            rt = self.d.runtime
            old = data.draw(st.sampled_from(sorted(rt.cpusets)))
            pod = rt.container_pod[old]
            if "besteffort" in rt.pods[pod].linux.cgroup_parent:
                milli = 0
            self.begin("CreateContainer", create_request(pod, rt.pods[pod], rt.container_name[old], cpu_milli=milli))
            assert old not in self.d.rm.policy.containers, "the older instance of a re-created container kept resources"
            self.exited.add(old)

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data())
        def exit(self, data: st.DataObject) -> None:
            """A container exits; a relist lists it (and every earlier exit) as exited: the watcher hands them over."""
            cid = data.draw(st.sampled_from(sorted(self.d.runtime.cpusets)))
            self.exited.add(cid)
            self.send(self.d.rm.containers_exited(sorted(self.exited)))
            assert not self.exited & set(self.d.rm.policy.containers), "an exited container holds resources"

        @precondition(lambda self: self.inflight)
        @rule(data=st.data())
        def answer(self, data: st.DataObject) -> None:
            """The runtime answers one of the calls in flight with success."""
            call = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))
            rt, sent = self.d.runtime, call.result.request or call.request
            if call.method == "CreateContainer":
                self.n += 1
                cid = f"ctr-{self.n}"
                res = sent.config.linux.resources
                rt.cpusets[cid] = (res.cpuset_cpus, res.cpuset_mems)
                rt.container_pod[cid] = sent.pod_sandbox_id
                rt.container_name[cid] = sent.config.metadata.name
                response: Any = api_pb2.CreateContainerResponse(container_id=cid)
            elif call.method == "UpdateContainerResources":
                def apply() -> None:
                    cpus, mems = rt.cpusets[call.cid]
                    rt.cpusets[call.cid] = (sent.linux.cpuset_cpus or cpus, sent.linux.cpuset_mems or mems)
                placed = call.result.placed
                if placed is not None:
                    self.order.forward(placed, apply, lambda u: rt.apply([u]))
                else:
                    apply()
                response = api_pb2.UpdateContainerResourcesResponse()
            else:
                response = api_pb2.StopContainerResponse()
            self.send(self.d.rm.after(call.method, sent, response, call.result.call))

        @precondition(lambda self: any(c.method != "StopContainer" for c in self.inflight))
        @rule(data=st.data())
        def fail(self, data: st.DataObject) -> None:
            """The runtime refuses a create or a resize."""
            failing = [c for c in self.inflight if c.method != "StopContainer"]
            call = data.draw(st.sampled_from(failing))
            self.inflight.remove(call)
            sent = call.result.request or call.request
            key = getattr(call.result.call, "key", None)
            self.send(self.d.rm.failed(call.method, sent, call.result.call))
            if key is not None:
                assert key not in self.d.rm.policy.containers, "a failed create kept its reservation"

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data(), milli=MILLI)
        def reserve_resize(self, data: st.DataObject, milli: int) -> None:
            """Kubelet's in-place resize of a running container (one call per container at a time)."""
            idle = sorted(c for c in self.d.runtime.cpusets if not self.busy(c))
            if not idle:
                return
            cid = data.draw(st.sampled_from(idle))
            pod = self.d.runtime.pods[self.d.runtime.container_pod[cid]]
            if "besteffort" in pod.linux.cgroup_parent:
                return
            linux = api_pb2.LinuxContainerResources(cpuset_cpus="0", cpu_shares=max(2, milli * 1024 // 1000))
            if "burstable" not in pod.linux.cgroup_parent and milli:
                linux.cpu_period, linux.cpu_quota, linux.memory_limit_in_bytes = 100_000, milli * 100, 1 << 30
            self.begin("UpdateContainerResources",
                       api_pb2.UpdateContainerResourcesRequest(container_id=cid, linux=linux), cid)

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data())
        def begin_stop(self, data: st.DataObject) -> None:
            """A StopContainer that stays in the runtime (its grace period) while other calls go on."""
            idle = sorted(c for c in self.d.runtime.cpusets if not self.busy(c))
            if idle:
                cid = data.draw(st.sampled_from(idle))
                self.begin("StopContainer", api_pb2.StopContainerRequest(container_id=cid), cid)

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data())
        def remove(self, data: st.DataObject) -> None:
            idle = sorted(c for c in self.d.runtime.cpusets if not self.busy(c))
            if idle:
                cid = data.draw(st.sampled_from(idle))
                freed = self.d.rm.policy.grants.get(cid)
                self.exited.discard(cid)
                # Its updates for other containers go in decision order too, as every update in the relay does.
                self.d.remove_container(cid, send=self.send)
                if freed is not None and freed.exclusive:
                    owned = set().union(*self.d.rm.policy.exclusive_sets().values())
                    assert not freed.exclusive & owned, "freed exclusive CPUs still owned"

        # -- invariants ------------------------------------------------------------------------
        @invariant()
        def invariants(self) -> None:
            if not hasattr(self, "d"):
                return
            rm = self.d.rm
            seen: set[int] = set()
            for owner, cpus in rm.policy.exclusive_sets().items():
                assert not cpus & seen, f"a CPU of {owner} is exclusive to two owners"
                seen |= cpus
            for call in self.inflight:  # a reservation stays what was decided until the runtime answers
                key = getattr(call.result.call, "key", None)
                if key is not None:
                    assert rm.policy.grants.get(key) == call.grant, f"reservation {key} changed under it"
            placements = rm.placements()
            resizing = self.resizing()
            # Stopped containers stay in the runtime without a placement.
            runtime = {cid: v for cid, v in self.d.runtime_view().items() if cid not in resizing and cid in placements}
            assert runtime == {cid: v for cid, v in placements.items() if cid not in resizing}, \
                "the runtime does not hold what the policy decided"
            if not self.inflight:  # reservations are not persisted (their answer is unknown after a restart)
                restored = self.d.new_rm()
                created = set(self.d.runtime.cpusets) & set(rm.policy.containers)
                assert {c: restored.placements().get(c) for c in created} == {c: placements[c] for c in created}, \
                    "a restore from the cache differs from the live state"
                # (Stopped containers are left out: the cache does not say they stopped, a restart
                # re-allocates them until sync_with_runtime sees them exited.)
                assert {c: g for c, g in restored.policy.grants.items() if c in created} == {
                    c: g for c, g in rm.policy.grants.items() if not c.startswith(PENDING_PREFIX)}
                assert not self.exited & set(restored.policy.containers), "a restore placed an exited container"

        def check_drained(self) -> None:
            """Answer everything, remove everything: the policy is back where it started."""
            while self.inflight:
                call = self.inflight.pop()
                self.send(self.d.rm.failed(call.method, call.result.request or call.request, call.result.call))
            for cid in sorted(self.d.runtime.cpusets):
                self.d.remove_container(cid, send=self.send)
            self.exited.clear()
            assert not self.d.rm.policy.containers
            if self.d.rm.policy.name != "balloons":
                assert self.d.rm.policy.exclusive_sets() == self.initial

        @rule()
        def drain(self) -> None:
            self.check_drained()

    return ConcurrentCalls


@pytest.mark.property
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_concurrent_call_sequences(scenario: str, topologies: dict[str, Topology]) -> None:
    topo_name, config_text = SCENARIOS[scenario]
    run_state_machine_as_test(make_machine(topologies[topo_name], config_text), settings=settings(
        max_examples=int(os.environ.get("CONCURRENT_SM_EXAMPLES", examples(15))), stateful_step_count=30,
        deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_two_concurrent_creates_never_share_exclusive_cpus(topologies: dict[str, Topology], tmp_path: Path) -> None:
    """Reserve A, reserve B, answer B, fail A: B keeps its CPUs, A's come back, nothing overlaps."""
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, SCENARIOS["static-2s"][1])
    pod = d.run_pod("g", qos="guaranteed")
    req_a = create_request(pod, d.runtime.pods[pod], "a", cpu_milli=4000)
    req_b = create_request(pod, d.runtime.pods[pod], "b", cpu_milli=4000)
    a, b = d.rm.before("CreateContainer", req_a), d.rm.before("CreateContainer", req_b)
    cpus_a = parse_cpuset(a.request.config.linux.resources.cpuset_cpus)
    cpus_b = parse_cpuset(b.request.config.linux.resources.cpuset_cpus)
    assert len(cpus_a) == len(cpus_b) == 4 and not cpus_a & cpus_b
    d.rm.after("CreateContainer", b.request, api_pb2.CreateContainerResponse(container_id="ctr-b"), b.call)
    d.rm.failed("CreateContainer", a.request, a.call)
    owned = d.rm.policy.exclusive_sets()
    assert owned == {"ctr-b": cpus_b}
    c = d.rm.before("CreateContainer", create_request(pod, d.runtime.pods[pod], "c", cpu_milli=4000))
    assert not parse_cpuset(c.request.config.linux.resources.cpuset_cpus) & cpus_b


def test_a_refused_resize_is_not_left_in_the_cache(topologies: dict[str, Topology], tmp_path: Path) -> None:
    """Found by the machine above with a random seed: reserve a resize, let another call save the cache (a new
    pod), then the runtime refuses the resize. A restart must not restore the size kubelet asked for."""
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, SEED_BALLOONS)
    pod = d.run_pod("p", qos="burstable")
    cid = d.create(pod, "c", milli=2000)
    assert cid is not None and d.rm.policy.grants[cid].shared_milli == 2000
    linux = api_pb2.LinuxContainerResources(cpuset_cpus="0", cpu_shares=1536)
    resize = d.rm.before("UpdateContainerResources", api_pb2.UpdateContainerResourcesRequest(container_id=cid,
                                                                                             linux=linux))
    assert d.rm.policy.grants[cid].shared_milli == 1500  # reserved
    d.run_pod("q")  # saves the cache, reservation included
    d.runtime.apply(d.rm.failed("UpdateContainerResources", resize.request, resize.call))
    live = d.rm.policy.grants[cid]
    assert live.shared_milli == 2000
    restored = d.new_rm()
    assert restored.policy.grants[cid] == live
    assert restored.placements()[cid] == d.rm.placements()[cid]


def test_a_stopped_container_is_not_allocated_again_by_a_restore(topologies: dict[str, Topology],
                                                                  tmp_path: Path) -> None:
    """Found by the machine above with a random seed: a stopped balloon member holds nothing, but a restore
    from the cache allocated it again, growing its balloon and moving the other members."""
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, SEED_BALLOONS)
    pod = d.run_pod("p", qos="burstable")
    first = d.create(pod, "a", milli=250)
    second = d.create(pod, "b", milli=0)
    assert first and second
    d.call("StopContainer", api_pb2.StopContainerRequest(container_id=first), api_pb2.StopContainerResponse())
    assert first in d.rm.containers and first not in d.rm.policy.containers
    restored = d.new_rm()
    assert first not in restored.policy.containers and first not in restored.policy.grants
    assert restored.placements() == d.rm.placements()
    assert restored.policy.grants == d.rm.policy.grants
