"""Config sources in the real cri-resmgr: --force-config beats the agent (information, the agent stays Ready)
and reloads on SIGHUP; the last config from the agent survives a restart of cri-resmgr; a fallback file that
does not fit the node is set aside and annotated; fields accepted but not applied are annotated as information;
unknown fields are left out of the applied config, with a warning."""

from __future__ import annotations

import signal

import pytest
from integration.agent.conftest import NAMESPACE, policy_section, put_config_map, wait_for

from resmgr.agent.reporting import (
    CONFIG_ERROR_ANNOTATION,
    CONFIG_INFO_ANNOTATION,
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_WARNING_ANNOTATION,
    RELAY_CONFIG_ERROR_ANNOTATION,
)

pytestmark = pytest.mark.integration

DEFAULT = "cri-resmgr-config.default"
FORCE = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:{}\n"


def test_force_config_disables_the_agent_and_sighup_reloads_it(plane_node):
    node = plane_node(force=FORCE.format(0))
    cid = node.run_container("forced")
    assert node.containerd.cgroup_cpuset(cid) == "1"
    put_config_map(node.core, DEFAULT, policy_section("1"))
    # Upstream: force wins. That is information, not an error: the agent stays Ready.
    info = wait_for(lambda: node.annotations().get(CONFIG_INFO_ANNOTATION), "config-info annotation")
    assert "force config in effect; dynamic configs not applied" in info and "--force-config" in info
    assert DEFAULT in info and CONFIG_ERROR_ANNOTATION not in node.annotations()
    probe = node.probe()
    assert probe.returncode == 0, probe.stdout + probe.stderr
    # The agent posts its Event after the annotation patch the wait above saw.
    wait_for(lambda: any(e.reason == "ForceConfigInEffect" and e.type == "Normal" for e in node.events()),
             "ForceConfigInEffect Event")
    assert node.containerd.cgroup_cpuset(cid) == "1"  # the agent's config was not applied
    node.force.write_text(FORCE.format(1))
    node.resmgr.popen.send_signal(signal.SIGHUP)
    wait_for(lambda: node.containerd.cgroup_cpuset(cid) == "0", f"SIGHUP reloaded the forced file\n{node.logs()}")
    node.force.write_text("policy: [not yaml\n")
    node.resmgr.popen.send_signal(signal.SIGHUP)
    wait_for(lambda: "config from " + str(node.force) + " rejected" in node.resmgr.log_path.read_text(),
             "bad forced file rejected")
    assert node.containerd.cgroup_cpuset(cid) == "0" and node.resmgr.alive()


def test_agent_config_survives_a_restart_and_is_delivered_again(plane_node):
    node = plane_node()
    put_config_map(node.core, DEFAULT, policy_section("1"))
    node.wait_reserved("1")
    before = node.agent.log_path.read_text().count("pushing ConfigMap")
    node.resmgr.stop()
    node.start_resmgr()  # same relay dir; the agent keeps running
    # The cached agent config is in force right away: a new container goes to the shared CPU 0.
    cid = node.run_container("after-restart")
    assert node.containerd.cgroup_cpuset(cid) == "0"
    assert node.active_config()[1] == f"ConfigMap {NAMESPACE}/{DEFAULT}"
    # The agent noticed the lost connection and delivered the config to the new process.
    wait_for(lambda: node.agent.log_path.read_text().count("pushing ConfigMap") > before, "re-delivery")
    wait_for(lambda: "config from ConfigMap" in node.resmgr.log_path.read_text().split("relay serving")[-1],
             "new cri-resmgr got the config")
    assert node.probe().returncode == 0


UNFIT = "policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:0-200\n"  # no test node has 201 CPUs


def test_unfit_fallback_is_set_aside_and_annotated_until_a_config_works(plane_node):
    """Issue 16 item 2: the relay runs (policy none) and the node says why, through the agent."""
    node = plane_node(fallback=UNFIT)
    note = wait_for(lambda: node.annotations().get(RELAY_CONFIG_ERROR_ANNOTATION), "relay-config-error annotation")
    assert note.startswith(f"fallback-config {node.fallback} not used: ") and "AvailableResources" in note
    assert note.endswith("running with the config from defaults")
    node.run_container("unpinned")  # kubelet's runtime works all along
    # The relay runs policy none now: a config for none applies at runtime (another policy needs a restart,
    # or the live policy switch), and then a config works again.
    put_config_map(node.core, DEFAULT, policy_section("1", active="none"))
    node.wait_reserved("1")
    wait_for(lambda: RELAY_CONFIG_ERROR_ANNOTATION not in node.annotations(), "annotation removed")
    assert node.probe().returncode == 0


def test_fields_accepted_but_not_applied_are_information(plane_node):
    node = plane_node()
    put_config_map(node.core, DEFAULT, {**policy_section("1"), "dump": "Debug: true\n",
                                        "instrumentation": "Sampling: production\n"})
    node.wait_reserved("1")
    info = wait_for(lambda: node.annotations().get(CONFIG_INFO_ANNOTATION), "config-info annotation")
    assert info.endswith("accepted, not implemented by this cri-resmgr, ignored: dump.Debug, "
                         "instrumentation.Sampling")
    assert CONFIG_ERROR_ANNOTATION not in node.annotations() and node.probe().returncode == 0
    # The agent posts its Events after the annotation patch the wait above saw.
    wait_for(lambda: any(e.reason == "ConfigFieldsIgnored" for e in node.events()), "ConfigFieldsIgnored Event")
    # cri-resmgr's log says it too, when the config arrives
    assert "ignored: dump.Debug, instrumentation.Sampling" in node.resmgr.log_path.read_text()


def test_unknown_fields_are_left_out_with_a_warning(plane_node):
    """Upstream ignores an unknown key and starts: so does cri-resmgr, for its fallback file at startup and for
    the agent's ConfigMap; the log, the node annotation config-warning and a Warning Event name the key and the
    closest known one; nothing is an error and the agent stays Ready."""
    node = plane_node(fallback="policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n"
                               "  ReservedResource:\n    cpu: cpuset:1\n")
    cid = node.run_container("on-fallback")
    assert node.containerd.cgroup_cpuset(cid) == "1"  # the fallback file is in force, without the typo
    log = node.resmgr.log_path.read_text()
    assert (f"config from {node.fallback}: unknown field, left out of the config: policy.ReservedResource "
            "(did you mean 'ReservedResources'?)") in log
    assert RELAY_CONFIG_ERROR_ANNOTATION not in node.annotations()

    put_config_map(node.core, DEFAULT, {"policy": "Active: topology-aware\nReservedResources:\n  cpu: cpuset:1\n"
                                                  "topology-aware:\n  PinCPUs: false\n"})
    node.wait_reserved("1")
    warning = wait_for(lambda: node.annotations().get(CONFIG_WARNING_ANNOTATION), "config-warning annotation")
    assert warning.startswith(f"{NAMESPACE}/{DEFAULT}@")
    assert warning.endswith(": unknown field, left out of the config: policy.topology-aware.PinCPUs "
                            "(did you mean 'PinCPU'?)")
    annotations = node.annotations()
    assert CONFIG_ERROR_ANNOTATION not in annotations
    assert annotations[CONFIG_SOURCE_ANNOTATION].startswith(f"{NAMESPACE}/{DEFAULT}@")
    assert node.probe().returncode == 0
    event = wait_for(lambda: [e for e in node.events() if e.reason == "ConfigFieldsUnknown"], "Warning Event")[-1]
    assert event.type == "Warning" and "policy.topology-aware.PinCPUs (did you mean 'PinCPU'?)" in event.message
    wait_for(lambda: f"config from ConfigMap {NAMESPACE}/{DEFAULT}: unknown field, left out of the config: "
             "policy.topology-aware.PinCPUs" in node.resmgr.log_path.read_text(), "cri-resmgr's log warning")
    # fixed: the warning goes
    put_config_map(node.core, DEFAULT, policy_section("0"))
    node.wait_reserved("0")
    wait_for(lambda: CONFIG_WARNING_ANNOTATION not in node.annotations(), "config-warning annotation removed")
