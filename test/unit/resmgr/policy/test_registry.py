"""The policy registry: names, example configs, topology-dependent config errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed

from resmgr.config import POLICY_NAMES, ConfigError, check_config_text, validate_config_text
from resmgr.policy.registry import available_policies, create_policy, policy_class
from resmgr.topology import Topology


def test_registry_matches_schema() -> None:
    assert tuple(available_policies()) == POLICY_NAMES


@pytest.mark.parametrize(("text", "field"), [
    ("policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:0-200\n", "policy.AvailableResources.cpu"),
    ("policy:\n  Active: static\n  ReservedResources:\n    cpu: 300\n", "policy.ReservedResources.cpu"),
    ("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: x\n        MinCPUs: 100\n"
     "        MinBalloons: 2\n", "policy.balloons.BalloonTypes[0].MinBalloons"),
])
def test_topology_dependent_config_errors(topologies: dict[str, Topology], text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_policy(validate_config_text(text), topologies["2s-2n-16c-2t"])
    assert info.value.field == field


def test_each_entry_names_its_own_class() -> None:
    for name in POLICY_NAMES:
        cls = policy_class(name)
        assert cls is not None and cls.name == name
    assert policy_class("no-such-policy") is None


def test_only_the_active_policy_is_imported() -> None:
    """The relay imports the policy it runs, not all of them (resident memory)."""
    script = ("import sys, resmgr.cli\n"
              "from resmgr.policy.registry import create_policy\n"
              "from resmgr.topology.model import Topology\n"
              "before = sorted(m for m in sys.modules if m.startswith('resmgr.policy.'))\n"
              "print(' '.join(before))\n")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout.split()
    policies = {m.rsplit(".", 1)[1] for m in out} & {n.replace("-", "_") for n in POLICY_NAMES}
    assert policies == set(), f"policy modules imported before any policy is created: {policies}"


def test_policy_registry_always_offers_none():
    assert "none" in available_policies()


EXAMPLES = sorted((Path(__file__).resolve().parents[4] / "examples" / "configs").glob("*.yaml"))


def test_examples_exist() -> None:
    assert EXAMPLES, "examples/configs/*.yaml are missing"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("shape", ["2s-2n-16c-2t", "8numa-256"])
def test_example_config_runs(path: Path, shape: str, topologies: dict[str, Topology]) -> None:
    config = validate_config_text(path.read_text(), source=str(path))
    policy = create_policy(config, topologies[shape])
    for i, ns in enumerate(["default", "prod-a", "batch", "kube-system"]):
        policy.allocate(f"g{i}", guaranteed(f"g{i}", 2000, ns=ns))
        policy.allocate(f"b{i}", burstable(f"b{i}", 500, ns=ns))
        policy.allocate(f"e{i}", ctr(f"e{i}", ns=ns))
    for cpus, _ in policy.placements().values():
        assert cpus is None or cpus  # a pinned container never gets an empty cpuset


TYPED = {
    "topology-aware": ("PinMemory: false\n    ReservedPoolNamespaces: [infra]\n",
                       lambda p: (p.opts.pin_memory, p.opts.reserved_pool_namespaces) == (False, ("infra",))),
    "balloons": ("PinCPU: false\n    BalloonTypes:\n      - Name: db\n",
                 lambda p: p.pin_cpu is False and "db" in p.types),
    "dynamic-pools": ("ReservedPoolNamespaces: [infra]\n", lambda p: p.reserved_namespaces == ["infra"]),
    "podpools": ("PinMemory: false\n", lambda p: p.pin_memory is False),
}


@pytest.mark.parametrize("name", sorted(TYPED))
def test_policies_take_their_typed_section(name: str, topologies: dict[str, Topology]) -> None:
    """A policy reads the typed ``policy`` section of the config it is given, not the raw mapping."""
    options, holds = TYPED[name]
    text = f"policy:\n  Active: {name}\n  ReservedResources:\n    cpu: 2\n  {name}:\n    {options}"
    checked = check_config_text(text)
    policy = create_policy(checked.config, topologies["2s-2n-16c-2t"])
    assert policy.policy_config == checked.sections.policy
    assert holds(policy)
