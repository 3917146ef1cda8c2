"""Config merging, validation with cri-resmgr's schema, and the static/dynamic split."""

from __future__ import annotations

import pytest
import yaml

from extension.configs import SplitConfigs, classify, validate_and_split
from extension.errors import ConfigurationError
from extension.provider_config import parse_provider_config
from extension.shoot_config import with_base


def test_shoot_wins_per_key():
    base = SplitConfigs(static={"fallback": "b", "force": "f"}, dynamic={"default": {"a": "1"}}, notes=["base"])
    shoot = SplitConfigs(static={"force": "g"}, dynamic={"default": {"c": "2"}, "node.n1": {"d": "3"}},
                         notes=["shoot"])
    merged = with_base(shoot, base)
    assert merged.static == {"fallback": "b", "force": "g"}
    assert merged.dynamic == {"default": {"c": "2"}, "node.n1": {"d": "3"}}
    assert merged.notes == ["base", "shoot"]


@pytest.mark.parametrize("name,kind", [("fallback", "static"), ("force", "static"), ("EXTRA_OPTIONS", "static"),
                                       ("default", "dynamic"), ("node.worker-1", "dynamic"),
                                       ("group.db.nodes", "dynamic"), ("pool.worker-a", "dynamic"),
                                       ("pool." + "a" * 63, "dynamic")])
def test_classify(name, kind):
    assert classify(name, where="x") == kind


@pytest.mark.parametrize("name", ["Default", "node.", "node.UPPER", "group.a_b", "policy", "node"])
def test_classify_rejects_unknown_or_bad_names(name):
    with pytest.raises(ConfigurationError) as e:
        classify(name, where=f"configs.{name}")
    assert e.value.field == f"configs.{name}"


@pytest.mark.parametrize("name,needle", [
    ("pool.", "is empty"),
    ("pool." + "a" * 64, "64 characters; a label value has at most 63"),
    ("pool.a b", "not a valid label value"),
    ("pool.Pool_A", "cannot be part of the ConfigMap name cri-resmgr-config.pool.Pool_A"),
])
def test_pool_names_are_checked_as_label_values(name, needle):
    """A pool config's name is the value of the node label worker.gardener.cloud/pool, and part of a ConfigMap
    name: the agent's own check decides, and the error says which rule the name breaks."""
    with pytest.raises(ConfigurationError) as e:
        validate_and_split({name: "policy:\n  Active: none\n"}, origins={name: "providerConfig.configs"})
    assert e.value.field == f"providerConfig.configs.{name}" and needle in str(e.value)
    assert "worker.gardener.cloud/pool" in str(e.value)


def test_pool_config_is_a_dynamic_configmap():
    split = validate_and_split({"pool.worker-a": "policy:\n  Active: static\n"})
    assert split.dynamic == {"pool.worker-a": {"policy": "Active: static\n"}}


def test_unknown_config_names_list_pool():
    with pytest.raises(ConfigurationError, match=r"node\.<NODE>, pool\.<POOL>, group\.<GROUP>"):
        classify("pools.a", where="x")


def test_split_keeps_static_text_and_sections_dynamic():
    split = validate_and_split({
        "fallback": "policy:\n  Active: none\n",
        "EXTRA_OPTIONS": "--log-level=debug",
        "default": "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\nlogger:\n  Debug: policy\n",
    })
    assert split.static == {"fallback": "policy:\n  Active: none\n", "EXTRA_OPTIONS": "--log-level=debug"}
    assert set(split.dynamic["default"]) == {"policy", "logger"}
    # Each section value is that section's YAML, as written (not normalised).
    assert yaml.safe_load(split.dynamic["default"]["policy"]) == {
        "Active": "topology-aware", "ReservedResources": {"CPU": "750m"}}


@pytest.mark.parametrize("text,field_part", [
    ("policy:\n  Active: nosuchpolicy\n", "policy.Active"),
    ("policy: [\n", "configs.default"),
    ("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: x\n        MinCPUs: -1\n",
     "MinCPUs"),
])
def test_invalid_configs_name_the_field(text, field_part):
    with pytest.raises(ConfigurationError) as e:
        validate_and_split({"default": text}, origins={"default": "providerConfig.configs"})
    assert field_part in e.value.field or field_part in str(e.value)
    assert str(e.value).startswith("providerConfig.configs.default")


def test_origin_names_the_operator_configmap():
    with pytest.raises(ConfigurationError) as e:
        validate_and_split({"force": "policy:\n  Active: bogus\n"}, origins={"force": "configmap garden/x"})
    assert str(e.value).startswith("configmap garden/x.force")


def test_oversized_config_is_rejected():
    from resmgr.config import MAX_CONFIG_BYTES

    text = "policy:\n  Active: none\n#" + "x" * MAX_CONFIG_BYTES
    with pytest.raises(ConfigurationError, match="over the limit"):
        validate_and_split({"default": text})


def test_empty_dynamic_config_is_rejected():
    with pytest.raises(ConfigurationError, match="empty"):
        validate_and_split({"node.n1": ""})


@pytest.mark.parametrize("value", ["foo --bar", "--x 'unterminated", "--metrics-interval=soon",
                                   "--relay-socket=/tmp/x.sock", "-reset-policy", "--shutdown-grace=soon"])
def test_extra_options_rejected_like_the_node_would(value):
    with pytest.raises(ConfigurationError) as e:
        validate_and_split({"EXTRA_OPTIONS": value})
    assert e.value.field == "configs.EXTRA_OPTIONS"


def test_known_extra_options_pass():
    split = validate_and_split({"EXTRA_OPTIONS": "--log-level=debug --shutdown-grace 10"})
    assert split.static == {"EXTRA_OPTIONS": "--log-level=debug --shutdown-grace 10"} and split.notes == []


def test_upstream_fields_and_flags_are_accepted_and_noted():
    """The Go extension's README EXTRA_OPTIONS and upstream-only fields pass; the status can say what is ignored."""
    split = validate_and_split({
        "EXTRA_OPTIONS": 'EXTRA_OPTIONS="--metrics-interval=10s"',
        "default": "policy:\n  Active: memtier\ndump:\n  Debug: true\n",
        "fallback": "policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: a\n"
                    "        ShareIdleCPUsInSame: numa\n",
    }, origins={"EXTRA_OPTIONS": "providerConfig.configs", "default": "providerConfig.configs",
                "fallback": "configmap garden/x"})
    assert split.dynamic["default"] == {"policy": "Active: memtier\n", "dump": "Debug: true\n"}  # as written
    assert split.notes == [
        "providerConfig.configs.EXTRA_OPTIONS: accepted, not implemented by this cri-resmgr, ignored: "
        "-metrics-interval (metrics are computed when /metrics is scraped; there is nothing to poll)",
        "providerConfig.configs.default: accepted, not implemented by this cri-resmgr, ignored: "
        "dump.Debug",
        "configmap garden/x.fallback: accepted, not implemented by this cri-resmgr, ignored: "
        "policy.balloons.BalloonTypes[0].ShareIdleCPUsInSame",
    ]


def test_unknown_fields_are_noted_and_the_config_kept_as_written():
    """An unknown key is no reason to refuse (upstream ignores it): it becomes a note with a suggestion, and
    the config goes to the nodes as written, where cri-resmgr leaves the key out and the agent warns too."""
    default = "policy:\n  Active: none\n  Activ: static\n"
    split = validate_and_split({"default": default, "force": "logger:\n  Debugg: policy\n"},
                               origins={"default": "providerConfig.configs", "force": "configmap garden/x"})
    assert split.dynamic["default"] == {"policy": "Active: none\nActiv: static\n"}
    assert split.static["force"] == "logger:\n  Debugg: policy\n"
    assert split.notes == [
        "providerConfig.configs.default: unknown field, left out of the config: policy.Activ (did you mean 'Active'?)",
        "configmap garden/x.force: unknown field, left out of the config: logger.Debugg (did you mean 'Debug'?)",
    ]
    # a wrong type still refuses
    with pytest.raises(ConfigurationError) as e:
        validate_and_split({"default": "policy:\n  Activ: static\n  Active: 3\n"})
    assert e.value.field == "configs.default.policy.Active"


def test_provider_config_parsing():
    pc = parse_provider_config({"apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1",
                                "kind": "CriResMgrConfig", "configs": {"default": "policy: {}"},
                                "nodeSelector": {"example.com/x": "y"}, "workerPools": ["a", "b"]})
    assert pc.configs == {"default": "policy: {}"}
    assert pc.node_selector == {"example.com/x": "y"}
    assert pc.worker_pools == ("a", "b")
    assert parse_provider_config(None).configs == {}


@pytest.mark.parametrize("raw,field", [
    ("text", "providerConfig"),
    ({"configz": {}}, "providerConfig.configz"),
    ({"kind": "Other"}, "providerConfig.kind"),
    ({"configs": {"default": 3}}, "providerConfig.configs.default"),
    ({"configs": ["x"]}, "providerConfig.configs"),
    ({"nodeSelector": {"bad key!": "v"}}, "providerConfig.nodeSelector"),
    ({"nodeSelector": {"k": "bad value!"}}, "providerConfig.nodeSelector.k"),
    ({"workerPools": "a"}, "providerConfig.workerPools"),
    ({"workerPools": ["a", "a"]}, "providerConfig.workerPools"),
])
def test_provider_config_errors_name_the_field(raw, field):
    with pytest.raises(ConfigurationError) as e:
        parse_provider_config(raw)
    assert e.value.field == field


def test_extra_options_check_loads_neither_the_installer_nor_the_relay():
    import subprocess
    import sys

    # The seed operator checks a flag line with the flag table alone (resmgr.options, argparse only).
    code = ("import sys\n"
            "from extension.configs import validate_extra_options\n"
            "validate_extra_options('--log-level debug', where='EXTRA_OPTIONS')\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] == 'installer' or m.startswith(('resmgr.relay', "
            "'resmgr.manager', 'resmgr.cli', 'grpc'))]\n"
            "assert not loaded, loaded\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
