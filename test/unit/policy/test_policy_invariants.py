"""Hypothesis-driven create/remove/update/restart sequences; invariants checked after every step.

Invariants:
* no CPU is exclusive to two containers (and no other container's cpuset touches it);
* reserved CPUs are never exclusive;
* every cpuset lies within AvailableResources;
* what the runtime holds (create-time cpuset + ContainerUpdates) equals the policy's placements,
  so side updates are complete;
* freeing returns the CPUs (after removing everything the policy is back to its initial state);
* a restore from the cache equals the state before the restart.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
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
from rm_driver import Driver

from resmgr.config import validate_config_text
from resmgr.topology import Topology, parse_cpuset

SCENARIOS = {
    "static-2s": ("2s-2n-16c-2t", "policy:\n  Active: static\n  ReservedResources:\n    cpu: 2\n"),
    "static-small": ("this-machine", "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"),
    "topology-aware-8numa": ("8numa-256", """\
policy:
  Active: topology-aware
  AvailableResources:
    cpu: cpuset:0-223
  ReservedResources:
    cpu: 1500m
  topology-aware:
    ReservedPoolNamespaces: [monitoring]
    ColocatePods: true
"""),
    "topology-aware-2s-isolated": ("2s-2n-16c-2t", """\
policy:
  Active: topology-aware
  ReservedResources:
    cpu: cpuset:0,64
"""),
    # The seed project's example, with its balloon type also selected by namespace.
    "balloons-seed": ("2s-2n-16c-2t", SEED_BALLOONS.replace(
        "        MinBalloons: 2\n", "        MinBalloons: 2\n        Namespaces: [medium]\n")),
    "balloons-8numa": ("8numa-256", """\
policy:
  Active: balloons
  ReservedResources:
    cpu: 2
  balloons:
    BalloonTypes:
      - Name: app
        Namespaces: ["app-*"]
        MinCPUs: 1
        MaxCPUs: 16
        MaxBalloons: 4
      - Name: fixed
        MinCPUs: 4
        MaxCPUs: 4
        MinBalloons: 1
        Namespaces: [fixed]
"""),
}

QOS = st.sampled_from(["guaranteed", "burstable", "besteffort"])
MILLI = st.sampled_from([0, 100, 500, 1000, 1500, 2000, 3000, 4000, 8000, 20000])
NAMESPACES = st.sampled_from(["default", "kube-system", "monitoring", "medium", "app-a", "app-b", "fixed"])
ANNOTATIONS = st.sampled_from([
    {}, {"prefer-isolated-cpus.cri-resource-manager.intel.com": "false"},
    {"prefer-shared-cpus.cri-resource-manager.intel.com/pod": "true"},
    {"balloon.balloons.cri-resource-manager.intel.com": "mediumBalloon"},
])


def make_machine(topology: Topology, config_text: str) -> type[RuleBasedStateMachine]:
    class PolicyMachine(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            self.dir = Path(tempfile.mkdtemp(prefix="policy-sm-"))
            self.d = Driver(topology, self.dir, config_text)
            self.initial = self.d.rm.policy.exclusive_sets()
            self.pods: list[str] = []
            self.n = 0

        def teardown(self) -> None:
            if hasattr(self, "dir"):
                shutil.rmtree(self.dir, ignore_errors=True)

        @rule(qos=QOS, ns=NAMESPACES, annotations=ANNOTATIONS)
        def new_pod(self, qos: str, ns: str, annotations: dict[str, str]) -> None:
            self.n += 1
            self.pods.append(self.d.run_pod(f"p{self.n}", namespace=ns, qos=qos, annotations=annotations))

        @precondition(lambda self: self.pods)
        @rule(data=st.data(), milli=MILLI, fail=st.booleans())
        def create(self, data: st.DataObject, milli: int, fail: bool) -> None:
            pod = data.draw(st.sampled_from(self.pods))
            if "besteffort" in self.d.runtime.pods[pod].linux.cgroup_parent:
                milli = 0
            self.n += 1
            self.d.create(pod, f"c{self.n}", milli, fail=fail and self.n % 5 == 0)

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data())
        def remove_container(self, data: st.DataObject) -> None:
            cid = data.draw(st.sampled_from(sorted(self.d.runtime.cpusets)))
            freed = self.d.rm.policy.grants.get(cid)
            self.d.remove_container(cid)
            if freed is not None and freed.exclusive:
                owned = set().union(*self.d.rm.policy.exclusive_sets().values())
                assert not freed.exclusive & owned, "freed exclusive CPUs still owned"

        @precondition(lambda self: self.pods)
        @rule(data=st.data())
        def remove_pod(self, data: st.DataObject) -> None:
            pod = data.draw(st.sampled_from(self.pods))
            self.pods.remove(pod)
            self.d.remove_pod(pod)

        @precondition(lambda self: self.d.runtime.cpusets)
        @rule(data=st.data(), milli=st.none() | MILLI)
        def kubelet_update(self, data: st.DataObject, milli: int | None) -> None:
            """A cpuset-only update (kubelet's own CPU manager), or an in-place resize."""
            cid = data.draw(st.sampled_from(sorted(self.d.runtime.cpusets)))
            pod = self.d.runtime.pods[self.d.runtime.container_pod[cid]]
            if milli is not None and "besteffort" in pod.linux.cgroup_parent:
                milli = None
            guaranteed = "burstable" not in pod.linux.cgroup_parent
            self.d.kubelet_update(cid, "0", milli=milli, guaranteed=guaranteed)

        @rule()
        def restart(self) -> None:
            self.d.settle()
            placements = self.d.rm.placements()
            state = self.d.rm.policy.export_state()
            updates = self.d.restart()
            assert self.d.rm.placements() == placements, "restore from the cache changed placements"
            assert self.d.rm.policy.export_state() == state
            assert updates == []

        @rule()
        def reapply_config(self) -> None:
            self.d.runtime.apply(self.d.rm.set_config(validate_config_text(config_text), source="agent"))

        @invariant()
        def invariants(self) -> None:
            if hasattr(self, "d"):
                self.check()

        def check(self) -> None:
            rm = self.d.rm
            policy = rm.policy
            placements = rm.placements()
            # Side updates are complete: the runtime holds exactly what the policy wants.
            assert self.d.runtime_view() == placements
            owned = policy.exclusive_sets()
            seen: set[int] = set()
            for cpus in owned.values():
                assert not cpus & seen, "a CPU is exclusive to two owners"
                seen |= cpus
            reserved = getattr(policy, "reserved", frozenset())
            assert not seen & reserved, "reserved CPUs handed out exclusively"
            available = getattr(policy, "available", topology.online)
            for cid, (cpus, mems) in placements.items():
                if cpus is not None:
                    cset = parse_cpuset(cpus)
                    assert cset and cset <= available, f"{cid} cpuset {cpus} outside available"
                    grant = policy.grants.get(cid)
                    mine = grant.exclusive if grant is not None else frozenset()
                    others = seen - mine
                    if policy.name != "balloons":
                        assert not cset & others, f"{cid} runs on another container's exclusive CPUs"
                if mems is not None:
                    assert parse_cpuset(mems) <= set(topology.nodes)
            if not self.d.runtime.cpusets and not policy.containers:
                assert policy.exclusive_sets() == self.initial or policy.name == "balloons"
                if policy.name == "balloons":
                    total = set().union(*policy.exclusive_sets().values(), set())
                    assert len(total) == sum(len(v) for v in self.initial.values())

    return PolicyMachine


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_policy_sequences(scenario: str, topologies: dict[str, Topology]) -> None:
    topo_name, config_text = SCENARIOS[scenario]
    machine = make_machine(topologies[topo_name], config_text)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=int(os.environ.get("POLICY_SM_EXAMPLES", "20")), stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
