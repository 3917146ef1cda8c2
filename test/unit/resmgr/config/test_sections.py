"""The typed sections a config check returns: defaults, values, frozen, and bad values refused by the schema."""

from __future__ import annotations

import dataclasses

import pytest
from fixtures.relay_sections import RELAY_SECTIONS

from resmgr.config import ConfigError, check_config_sections, check_config_text
from resmgr.config.sections import DEFAULT_HTTP_ENDPOINT, ConfigSections

GOOD = """\
policy:
  Active: balloons
  ReservedResources:
    cpu: 1
  balloons:
    PinMemory: false
    BalloonTypes:
      - Name: db
        MinCPUs: 2
""" + RELAY_SECTIONS


def test_sections_are_typed():
    checked = check_config_text(GOOD)
    s = checked.sections
    assert s.raw == checked.config  # the normalised mapping stays what the cache and the agent echo
    assert s.logger.debug == ("relay", "dump")
    assert s.instrumentation.http_endpoint == "127.0.0.1:9999"
    assert s.dump.file == "/tmp/cri-full-message.dump"
    assert s.dump.level_for("CreateContainer") == "short" and s.dump.level_for("ListContainers") == "off"
    assert s.policy.active == "balloons" and s.policy.reserved == {"cpu": "1000m"}
    balloons = s.policy.balloons
    assert (balloons.pin_cpu, balloons.pin_memory, balloons.reserved_pool_namespaces) == (True, False, ("kube-system",))
    assert [bt["Name"] for bt in balloons.balloon_types] == ["db"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.policy = s.policy  # type: ignore[misc]


def test_defaults_of_an_empty_config():
    s = check_config_text("").sections
    assert s == ConfigSections.of({})
    assert s.policy.active == "none" and s.instrumentation.http_endpoint == DEFAULT_HTTP_ENDPOINT
    assert s.logger.debug == () and s.dump.rules == () and s.dump.file is None
    assert s.policy.topology_aware.prefer_isolated_cpus and not s.policy.topology_aware.prefer_shared_cpus
    assert s.policy.dynamic_pools.reserved_pool_namespaces == ()


def test_memtier_options_become_topology_aware_section():
    s = check_config_text("policy:\n  Active: memtier\n  memtier:\n    PinCPU: false\n").sections
    assert s.policy.active == "topology-aware" and s.policy.topology_aware.pin_cpu is False


def test_configmap_form_gives_the_same_sections():
    text = check_config_text(GOOD).sections
    by_key = check_config_sections({"policy": "Active: balloons\nReservedResources:\n  cpu: 1\nballoons:\n"
                                    "  PinMemory: false\n  BalloonTypes:\n    - Name: db\n      MinCPUs: 2\n",
                                    "logger": "Debug: relay,dump\n"}).sections
    assert by_key.policy == text.policy and by_key.logger == text.logger


@pytest.mark.parametrize("text, field, problem", [
    ("dump:\n  Config: 'loud:.*'\n", "dump.Config", "LEVEL one of off, short, full"),
    ("dump:\n  Config: 'full'\n", "dump.Config", "LEVEL:REGEXP"),
    ("dump:\n  Config: 'full:(unclosed'\n", "dump.Config", "invalid regexp"),
    ("dump:\n  Config: [full]\n", "dump.Config", "expected a string"),
    ("dump:\n  File: 3\n", "dump.File", "expected a string"),
    ("instrumentation:\n  HTTPEndpoint: 8891\n", "instrumentation.HTTPEndpoint", "expected a string"),
    ("instrumentation: [x]\n", "instrumentation", "expected a mapping"),
    ("logger:\n  Debug: [1, 2]\n", "logger.Debug[0]", "expected a string"),
    ("logger: 3\n", "logger", "expected a mapping"),
])
def test_bad_relay_sections_are_refused_by_the_schema_with_their_path(text, field, problem):
    with pytest.raises(ConfigError) as err:
        check_config_text(text, source="fallback.cfg")
    assert err.value.field == field
    assert problem in err.value.problem
    assert str(err.value).startswith(f"fallback.cfg: invalid config field {field}: ")


CONTROLLERS = """\
resource-manager:
  control:
    Controllers: {RDT: mandatory, blockio: disable}
cpu:
  classes:
    slow: {minFreq: 1000000, uncoreMaxFreq: 1200000}
rdt:
  options:
    mode: Discovery
    L3: {optional: true}
  partitions:
    p:
      l3Allocation: "60%"
      classes:
        gold: {mbAllocation: ["50%"]}
blockio:
  Classes:
    slow:
      - Weight: "80"
      - Devices: [/dev/vd*]
        ThrottleReadBps: 512k
"""


def test_the_controllers_sections_are_typed():
    s = check_config_text(CONTROLLERS).sections
    assert dict(s.resource_manager.controllers) == {"RDT": "Required", "blockio": "Disabled"}
    slow = s.cpu.classes["slow"]
    assert (slow.min_freq, slow.max_freq, slow.uncore_max_freq, slow.has_uncore) == (1_000_000, 0, 1_200_000, True)
    assert s.rdt.mode == "Discovery" and s.rdt.optional == {"l3"}
    p = s.rdt.partitions["p"]
    assert (p.allocations.l3, p.allocations.mb, p.classes["gold"].of_resource("mb")) == ("60%", None, ["50%"])
    weight, throttled = s.blockio.classes["slow"]
    # Block I/O values stay as written: the controller checks them (its mode decides what a bad one costs).
    assert (weight.weight, weight.devices, dict(weight.throttles)) == ("80", (), {})
    assert (throttled.weight, throttled.devices, dict(throttled.throttles)) == (None, ("/dev/vd*",),
                                                                                {"ThrottleReadBps": "512k"})
    assert s.raw["blockio"]["Classes"]["slow"][0]["Weight"] == "80"  # the mapping keeps the value as written
    assert ConfigSections().rdt.mode == "Full" and ConfigSections().blockio.classes == {}
