"""Config schema: cri-resource-manager's YAML format, strictness, and field-named errors."""

from __future__ import annotations

import logging

import pytest
from fixtures.hypothesis_profiles import examples
from fixtures.seed_configs import SEED_BALLOONS, SEED_FALLBACK, SEED_TOPOLOGY_AWARE, UPSTREAM_BALLOONS
from hypothesis import given, settings
from hypothesis import strategies as st

from resmgr.config import (
    MAX_CONFIG_BYTES,
    ConfigError,
    check_config_sections,
    check_config_text,
    parse_cpu_constraint,
    unknown_summary,
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
    ("policy:\n  topology-aware:\n    PinCPU: 'yes'\n", "policy.topology-aware.PinCPU", "true or false"),
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


# Upstream decodes options with Go's lenient JSON decoder: an unknown key is not applied, and the config
# starts. Here it is left out too, with a warning that suggests the closest known field.
@pytest.mark.parametrize(("text", "unknown", "config"), [
    ("policy:\n  Actve: none\n", ["policy.Actve (did you mean 'Active'?)"], {"policy": {}}),
    ("policy:\n  balloons:\n    BalloonTypes:\n      - Name: a\n        MinCPU: 1\n",
     ["policy.balloons.BalloonTypes[0].MinCPU (did you mean 'MinCPUs'?)"],
     {"policy": {"balloons": {"BalloonTypes": [{"Name": "a"}]}}}),
    ("policy:\n  Active: none\n  topology-aware:\n    PinCPUs: true\n    PinMemory: false\n",
     ["policy.topology-aware.PinCPUs (did you mean 'PinCPU'?)"],
     {"policy": {"Active": "none", "topology-aware": {"PinMemory": False}}}),
    ("polcy:\n  Active: none\n", ["polcy (did you mean 'policy'?)"], {}),
    # no close spelling: the warning names the field alone
    ("logger:\n  Debug: policy\n  Frobnicate: 3\n", ["logger.Frobnicate"], {"logger": {"Debug": ["policy"]}}),
    # the value of an unknown field is not checked: its type is unknown too
    ("policy:\n  Active: none\n  Extra: {a: [1, 2]}\n", ["policy.Extra"], {"policy": {"Active": "none"}}),
])
def test_unknown_fields_are_left_out_with_a_warning(text: str, unknown: list[str], config: dict) -> None:
    checked = check_config_text(text, source="fallback.cfg")
    assert checked.unknown == unknown
    assert checked.config == config and checked.ignored == []
    assert unknown_summary(checked.unknown).startswith("unknown field, left out of the config: ")


@pytest.mark.parametrize(("text", "field", "words"), [
    # a known field with a wrong type or a bad value still refuses the config, beside an unknown one
    ("policy:\n  balloons:\n    BalloonTypes:\n      - Name: a\n        PreferNewBalloon: true\n"
     "        PreferNewBalloons: 'yes'\n", "policy.balloons.BalloonTypes[0].PreferNewBalloons", "true or false"),
    ("policy:\n  Actve: none\n  Active: nosuch\n", "policy.Active", "unknown policy"),
    ("polcy: {}\npolicy:\n  ReservedResources:\n    cpu: lots\n", "policy.ReservedResources.cpu", "invalid CPU"),
])
def test_wrong_types_and_values_still_refuse_beside_unknown_fields(text: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_config_text(text)
    assert info.value.field == field and words in str(info.value)


def test_several_unknown_fields_are_reported_in_document_order() -> None:
    checked = check_config_text("policy:\n  Active: none\n  Pin: 1\nlogger:\n  Debg: policy\n")
    assert checked.unknown == ["policy.Pin", "logger.Debg (did you mean 'Debug'?)"]
    assert unknown_summary(checked.unknown) == ("unknown fields, left out of the config: policy.Pin, "
                                                "logger.Debg (did you mean 'Debug'?)")
    assert unknown_summary([]) == ""


def test_validate_logs_unknown_fields_as_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """cri-resmgr's log, wherever it validates (files at startup, the config plane, the cache): one warning."""
    with caplog.at_level(logging.INFO, logger="resmgr.config"):
        cfg = validate_config_text("policy:\n  Active: none\n  Actve: static\n", source="force.cfg")
    assert cfg == {"policy": {"Active": "none"}}
    [record] = [r for r in caplog.records if r.name == "resmgr.config"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == ("config from force.cfg: unknown field, left out of the config: "
                                   "policy.Actve (did you mean 'Active'?)")
    assert record.unknown_fields == ["policy.Actve (did you mean 'Active'?)"]


def test_unknown_fields_checked_outside_a_config_check_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A section checked alone (static-pools' pools file) leaves an unknown field out and logs it."""
    from resmgr.config.schema import STATIC_POOLS

    with caplog.at_level(logging.WARNING, logger="resmgr.config"):
        out = STATIC_POOLS.check({"pools": {"shared": {"exclusiv": True}}}, "pools.yaml")
    assert out == {"pools": {"shared": {}}}
    assert [r.getMessage() for r in caplog.records] == [
        "unknown field, left out of the config: pools.yaml.pools.shared.exclusiv (did you mean 'exclusive'?)"]


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
    checked = check_config_sections(data, source="cri-resmgr-config.default")
    cfg = checked.config
    assert cfg["policy"]["Active"] == "topology-aware"
    # the rdt controller applies it
    assert cfg["rdt"] == {"options": {"l3": {"optional": True}}} and checked.ignored == []
    with pytest.raises(ConfigError) as info:
        validate_config_sections({"policy": "Active: nope\n"}, source="cm")
    assert info.value.field == "policy.Active" and str(info.value).startswith("cm: ")
    with pytest.raises(ConfigError) as info:
        validate_config_sections({"policy": "Active: [\n"})
    assert info.value.field == "policy"
    # An unknown section is left out with a warning, as upstream ignores it.
    checked = check_config_sections({"bogus": "a: 1\n", "policy": "Active: none\n"})
    assert checked.config == {"policy": {"Active": "none"}} and checked.unknown == ["bogus"]


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
