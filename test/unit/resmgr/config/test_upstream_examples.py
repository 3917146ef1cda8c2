"""Every config example of cri-resource-manager's docs, sample-configs and e2e tests is accepted
(test/data/upstream, each file names its source), and what this cri-resmgr does not apply is listed, never
refused: fields it knows and does not implement, and fields nobody knows (upstream's own typos)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from resmgr.config import ConfigError, check_config_sections, check_config_text, ignored_summary, unknown_summary

UPSTREAM = Path(__file__).resolve().parents[4] / "test" / "data" / "upstream"
FILES = sorted(UPSTREAM.glob("*.cfg"))
CONFIGMAPS = sorted(UPSTREAM.glob("*.configmaps.yaml"))
# Upstream's examples with a field it does not know either (its decoder skips it): each a warning here.
UNKNOWN = {
    "balloons-e2e-maxballoons.cfg": ["policy.balloons.BalloonTypes[1].PreferNewBalloon "
                                     "(did you mean 'PreferNewBalloons'?)"],
}


def test_the_examples_are_there() -> None:
    assert len(FILES) >= 20 and CONFIGMAPS
    for path in FILES + CONFIGMAPS:
        assert path.read_text().startswith("# Source: intel/cri-resource-manager "), path.name


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_documented_example_is_accepted(path: Path) -> None:
    checked = check_config_text(path.read_text(), source=path.name)
    assert isinstance(checked.config, dict)
    assert checked.unknown == UNKNOWN.get(path.name, [])
    for entry in checked.ignored:  # what is reported is a real path of the example, not noise
        top = entry.split(".")[0].split("[")[0].split(":")[0]
        assert top in ("policy", "logger", "dump", "instrumentation", "resource-manager", "cpu", "rdt", "blockio")


@pytest.mark.parametrize("path", CONFIGMAPS, ids=lambda p: p.name)
def test_configmap_examples_are_accepted(path: Path) -> None:
    maps = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert len(maps) == 3
    for cm in maps:
        checked = check_config_sections(cm["data"], source=cm["metadata"]["name"])
        assert checked.config["policy"]["Active"] == "topology-aware" and checked.unknown == []
        assert {"rdt.options.monitoringDisabled", "policy.static.RelaxedIsolation"} <= set(checked.ignored)


@pytest.mark.parametrize(("name", "active", "ignored"), [
    ("balloons-policy.cfg", "balloons", ["instrumentation.PrometheusExport"]),
    ("balloons-md-0.cfg", "balloons", []),
    ("podpools-policy.cfg", "podpools", []),
    ("dynamic-pools-md-0.cfg", "dynamic-pools", []),
    ("topology-aware-md-6.cfg", "topology-aware", ["policy.topology-aware.DirtyBitScanPeriod",
                                                   "policy.topology-aware.PageMovePeriod",
                                                   "policy.topology-aware.PageMoveCount"]),
    ("static-pools-md-3.cfg", None, []),
    ("rdt-md-0.cfg", None, ["rdt.options.monitoringDisabled"]),
    ("blockio.cfg", "none", []),
    ("topology-aware-policy.cfg", "topology-aware", []),
    ("static-policy.cfg", "static", []),
    ("cri-full-message-dump.cfg", "none", []),
])
def test_what_is_ignored_is_named(name: str, active: str | None, ignored: list[str]) -> None:
    checked = check_config_text((UPSTREAM / name).read_text(), source=name)
    assert (checked.config.get("policy") or {}).get("Active") == active
    assert checked.ignored == ignored


def test_upstreams_balloons_example_with_its_typo_loads_with_one_warning() -> None:
    """Upstream's e2e config spells PreferNewBalloons without the s; upstream starts and never applies it."""
    name = "balloons-e2e-maxballoons.cfg"
    checked = check_config_text((UPSTREAM / name).read_text(), source=name)
    assert checked.unknown == ["policy.balloons.BalloonTypes[1].PreferNewBalloon (did you mean 'PreferNewBalloons'?)"]
    assert checked.ignored == []
    assert checked.config["policy"]["balloons"]["BalloonTypes"] == [
        {"Name": "singleton", "MinCPUs": 2, "MaxCPUs": 2, "MinBalloons": 1, "MaxBalloons": 1},
        {"Name": "dynamictwo", "MaxCPUs": 1, "MaxBalloons": 2},  # applied without the unknown key
    ]
    assert unknown_summary(checked.unknown) == (
        "unknown field, left out of the config: policy.balloons.BalloonTypes[1].PreferNewBalloon "
        "(did you mean 'PreferNewBalloons'?)")


# The examples of issue 17: valid upstream, refused before.
@pytest.mark.parametrize(("text", "ignored"), [
    ("dump: {Debug: true}\n", ["dump.Debug"]),
    ("instrumentation:\n  Sampling: 0.1\n", ["instrumentation.Sampling"]),
    ("instrumentation:\n  Sampling: production\n", ["instrumentation.Sampling"]),
    # implemented since issue 26: accepted and applied
    ("policy:\n  Active: balloons\n  balloons:\n    PreferSpreadOnPhysicalCores: true\n", []),
    ("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: a\n"
     "        AllocatorTopologyBalancing: true\n        PreferSpreadOnPhysicalCores: false\n", []),
])
def test_issue_examples_are_accepted(text: str, ignored: list[str]) -> None:
    checked = check_config_text(text)
    config, found = checked.config, checked.ignored
    assert found == ignored and checked.unknown == []
    assert "Debug" not in (config.get("dump") or {}) and "Sampling" not in (config.get("instrumentation") or {})
    assert ignored_summary(found) == ("accepted, not implemented by this cri-resmgr, ignored: " + ", ".join(ignored)
                                      if ignored else "")


def test_memtier_runs_as_topology_aware_with_its_own_options() -> None:
    text = ("policy:\n  Active: memtier\n  memtier:\n    PinMemory: false\n    PreferSharedCPUs: true\n"
            "  topology-aware:\n    PinMemory: true\n")
    checked = check_config_text(text)
    config, ignored = checked.config, checked.ignored
    # upstream's memtier reads policy.memtier; this cri-resmgr runs its topology-aware with those options
    assert config["policy"] == {"Active": "topology-aware",
                                "topology-aware": {"PinMemory": False, "PreferSharedCPUs": True}}
    assert ignored == ["policy.topology-aware"]
    checked = check_config_text("policy:\n  Active: topology-aware\n  memtier:\n    PinCPU: false\n")
    config, ignored = checked.config, checked.ignored
    assert config["policy"] == {"Active": "topology-aware"} and ignored == ["policy.memtier"]


@pytest.mark.parametrize(("text", "field", "words"), [
    ("dump:\n  Debug: 'yes'\n", "dump.Debug", "true or false"),  # ignored fields are still type-checked
    ("instrumentation:\n  Sampling: often\n", "instrumentation.Sampling", "sampling ratio"),
    ("rdt:\n  options:\n    mode: Fast\n", "rdt.options.mode", "unknown value 'Fast'"),
    ("resource-manager:\n  control:\n    Controllers:\n      rdt: sometimes\n",
     "resource-manager.control.Controllers.rdt", "invalid mode"),
    ("policy:\n  podpools:\n    Pools:\n      - Name: a\n        FillOrder: Random\n",
     "policy.podpools.Pools[0].FillOrder", "unknown value"),
    ("policy:\n  Active: podpool\n", "policy.Active", "did you mean 'podpools'"),
    ("policy:\n  podpools:\n    Pools:\n      - Name: a\n        CPU: 2500m\n", "policy.podpools.Pools[0].CPU",
     "invalid CPUs per pool"),
    ("policy:\n  podpools:\n    Pools:\n      - Name: a\n        MaxPods: 1\n", "policy.podpools.Pools[0].CPU",
     "missing CPUs"),
    ("policy:\n  podpools:\n    Pools:\n      - {Name: a, CPU: 1, Instances: 100 % CPUs}\n",
     "policy.podpools.Pools[0].Instances", "invalid Instances"),
    ("policy:\n  podpools:\n    Pools:\n      - {Name: a, CPU: 1}\n      - {Name: a, CPU: 2}\n",
     "policy.podpools.Pools[1].Name", "duplicate pool name"),
])
def test_typos_and_bad_values_stay_errors(text: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_config_text(text)
    assert info.value.field == field
    assert words in str(info.value)


@pytest.mark.parametrize(("text", "unknown"), [
    ("policy:\n  balloons:\n    PreferSpreadOnPhysicalCore: true\n",
     "policy.balloons.PreferSpreadOnPhysicalCore (did you mean 'PreferSpreadOnPhysicalCores'?)"),
    ("rdt:\n  option:\n    mode: Full\n", "rdt.option (did you mean 'options'?)"),
    ("cpu:\n  classes:\n    turbo:\n      maxFrequency: 3\n",
     "cpu.classes.turbo.maxFrequency (did you mean 'maxFreq'?)"),
    ("logger:\n  Klog:\n    verbosity: 3\n", "logger.Klog.verbosity"),
])
def test_typos_are_warnings_with_a_suggestion(text: str, unknown: str) -> None:
    assert check_config_text(text).unknown == [unknown]


def test_sections_are_reported_in_one_order_whatever_the_map_order() -> None:
    """The Config API's protobuf map has no order; the agent and cri-resmgr must name ignored fields alike."""
    data = {"policy": "Active: none\n", "instrumentation": "Sampling: 0.5\n", "dump": "Disabled: true\n"}
    forward = check_config_sections(data).ignored
    assert forward == check_config_sections(dict(reversed(data.items()))).ignored
    assert forward == ["dump.Disabled", "instrumentation.Sampling"]
    data["logger"] = "Debg: policy\n"
    assert check_config_sections(dict(reversed(data.items()))).unknown == ["logger.Debg (did you mean 'Debug'?)"]
