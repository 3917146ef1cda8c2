"""Config schema: cri-resource-manager's YAML format, strictness, and field-named errors."""

from __future__ import annotations

import pytest
from fixtures.hypothesis_profiles import examples
from fixtures.seed_configs import SEED_BALLOONS, SEED_FALLBACK, SEED_TOPOLOGY_AWARE, UPSTREAM_BALLOONS
from hypothesis import given, settings
from hypothesis import strategies as st

from resmgr.config import (
    MAX_CONFIG_BYTES,
    ConfigError,
    check_config_sections,
    parse_cpu_constraint,
    validate_config_sections,
    validate_config_text,
)

TOPOLOGY_AWARE_FULL = """\
policy:
  Active: topology-aware
  AvailableResources:
    cpu: cpuset:0-63
  ReservedResources:
    cpu: cpuset:0-1
  topology-aware:
    PinCPU: true
    PinMemory: true
    PreferIsolatedCPUs: true
    PreferSharedCPUs: false
    ReservedPoolNamespaces: [kube-system, "monitoring-*"]
    ColocatePods: true
    ColocateNamespaces: false
  static:
    RelaxedIsolation: true
"""


@pytest.mark.parametrize("text", [SEED_BALLOONS, SEED_FALLBACK, SEED_TOPOLOGY_AWARE, UPSTREAM_BALLOONS,
                                  TOPOLOGY_AWARE_FULL])
def test_known_good_configs_validate(text: str) -> None:
    cfg = validate_config_text(text)
    assert cfg["policy"]["Active"] in ("balloons", "topology-aware")


def test_normalisation() -> None:
    cfg = validate_config_text(SEED_BALLOONS)
    assert cfg["policy"]["AvailableResources"] == {"cpu": "cpuset:1-15"}
    assert cfg["policy"]["ReservedResources"] == {"cpu": "cpuset:15"}
    assert cfg["policy"]["balloons"]["BalloonTypes"][0] == {
        "Name": "mediumBalloon", "MinCPUs": 3, "MaxCPUs": 3, "MinBalloons": 2}
    assert validate_config_text(SEED_TOPOLOGY_AWARE)["policy"]["ReservedResources"] == {"cpu": "750m"}
    assert validate_config_text(SEED_FALLBACK)["logger"]["Debug"][:2] == ["resource-manager", "cache"]
    # Go's JSON decoder matches field names case-insensitively; so do we, with canonical output.
    cfg = validate_config_text("policy:\n  active: static\n  reservedresources:\n    cpu: 2\n")
    assert cfg == {"policy": {"Active": "static", "ReservedResources": {"cpu": "2000m"}}}


def test_empty_config_is_valid() -> None:
    assert validate_config_text("") == {}
    assert validate_config_text("# only a comment\n") == {}


@pytest.mark.parametrize(("text", "field", "words"), [
    ("policy:\n  Active: fancy\n", "policy.Active", "unknown policy 'fancy'"),
    ("policy:\n  Active: topolgy-aware\n", "policy.Active", "did you mean 'topology-aware'"),
    ("policy:\n  Actve: none\n", "policy.Actve", "did you mean 'Active'"),
    ("policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:3-1\n",
     "policy.AvailableResources.cpu", "descending"),
    ("policy:\n  ReservedResources:\n    cpu: lots\n",
     "policy.ReservedResources.cpu", "invalid CPU quantity"),
    ("policy:\n  AvailableResources:\n    cpu: cpuset:0-3\n  ReservedResources:\n    cpu: cpuset:4\n",
     "policy.ReservedResources.cpu", "not in AvailableResources"),
    ("policy:\n  AvailableResources:\n    cpu: 2\n  ReservedResources:\n    cpu: 3\n",
     "policy.ReservedResources.cpu", "larger than available"),
    ("policy:\n  AvailableResources:\n    cpu: cpuset:0-1\n  ReservedResources:\n    cpu: 2500m\n",
     "policy.ReservedResources.cpu", "larger than available"),
    ("policy:\n  balloons:\n    BalloonTypes:\n      - Name: a\n        MinCPUs: 4\n        MaxCPUs: 2\n",
     "policy.balloons.BalloonTypes[0].MinCPUs", "larger than MaxCPUs"),
    ("policy:\n  balloons:\n    BalloonTypes:\n      - Name: a\n      - Name: b\n        MinCPUs: '3'\n",
     "policy.balloons.BalloonTypes[1].MinCPUs", "expected an integer"),
    ("policy:\n  balloons:\n    BalloonTypes:\n      - Name: a\n      - Name: a\n",
     "policy.balloons.BalloonTypes[1].Name", "duplicate"),
    ("policy:\n  balloons:\n    BalloonTypes:\n      - MinCPUs: 1\n",
     "policy.balloons.BalloonTypes[0].Name", "required"),
    ("policy:\n  balloons:\n    BalloonTypes:\n      - Name: a\n        MinCPU: 1\n",
     "policy.balloons.BalloonTypes[0].MinCPU", "unknown field"),
    ("policy:\n  topology-aware:\n    PinCPU: 'yes'\n", "policy.topology-aware.PinCPU", "true or false"),
    ("policy:\n  topology-aware:\n    PinCPUs: true\n", "policy.topology-aware.PinCPUs", "unknown field"),
    ("polcy:\n  Active: none\n", "polcy", "unknown field"),
    ("policy:\n  AvailableResources:\n    gpu: 1\n", "policy.AvailableResources.gpu", "unknown resource"),
    ("policy: [1, 2]\n", "policy", "expected a mapping"),
    ("- just\n- a list\n", "<document>", "expected a mapping"),
    ("policy:\n  Active: none\n  Active: static\n", "<document>", "duplicate key"),
    ("policy:\n  Active: [unclosed\n", "<document>", "invalid YAML at line"),
    ("instrumentation:\n  ReportPeriod: soon\n", "instrumentation.ReportPeriod", "invalid duration"),
])
def test_bad_configs_name_the_field(text: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config_text(text, source="fallback.cfg")
    assert info.value.field == field
    assert words in str(info.value)
    assert field in str(info.value) and str(info.value).startswith("fallback.cfg: ")
    assert isinstance(info.value, ValueError)


def test_size_limit() -> None:
    big = "logger:\n  Debug: " + "x" * MAX_CONFIG_BYTES + "\n"
    with pytest.raises(ConfigError) as info:
        validate_config_text(big)
    assert info.value.field == "<document>" and "limit" in str(info.value)


def test_sections_form() -> None:
    data = {
        "policy": "Active: topology-aware\nReservedResources:\n  CPU: 750m\n",
        "logger": "Debug: policy\n",
        "rdt": "options:\n  l3:\n    optional: true\n",
    }
    cfg, ignored = check_config_sections(data, source="cri-resmgr-config.default")
    assert cfg["policy"]["Active"] == "topology-aware"
    assert cfg["rdt"] == {"options": {"l3": {"optional": True}}} and ignored == []  # the rdt controller applies it
    with pytest.raises(ConfigError) as info:
        validate_config_sections({"policy": "Active: nope\n"}, source="cm")
    assert info.value.field == "policy.Active" and str(info.value).startswith("cm: ")
    with pytest.raises(ConfigError) as info:
        validate_config_sections({"policy": "Active: [\n"})
    assert info.value.field == "policy"
    with pytest.raises(ConfigError) as info:
        validate_config_sections({"bogus": "a: 1\n"})
    assert info.value.field == "bogus"


@pytest.mark.parametrize(("value", "kind", "expect"), [
    ("cpuset:0-3,8", "cpuset", frozenset({0, 1, 2, 3, 8})),
    ("0-3", "cpuset", frozenset({0, 1, 2, 3})),
    ("#5", "cpuset", frozenset({5})),
    ("750m", "quantity", 750),
    ("1.5", "quantity", 1500),
    (2, "quantity", 2000),
    ("quantity:3", "quantity", 3000),
    ("cgroup:/sys/fs/cgroup/cpuset/x", "cgroup", "/sys/fs/cgroup/cpuset/x"),
])
def test_cpu_constraints(value: object, kind: str, expect: object) -> None:
    c = parse_cpu_constraint(value)
    assert c.kind == kind
    assert {"cpuset": c.cpus, "quantity": c.milli, "cgroup": c.cgroup}[kind] == expect


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(text: str) -> None:
    try:
        validate_config_text(text)
    except ConfigError as exc:
        assert exc.field
