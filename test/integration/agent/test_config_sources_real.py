"""Config sources in the real cri-resmgr: --force-config beats the agent and reloads on SIGHUP; the last
config from the agent survives a restart of cri-resmgr."""

from __future__ import annotations

import signal

import pytest
from integration.agent.conftest import NAMESPACE, policy_section, put_config_map, wait_for

from resmgr.agent.reporting import CONFIG_ERROR_ANNOTATION

pytestmark = pytest.mark.integration

DEFAULT = "cri-resmgr-config.default"
FORCE = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:{}\n"


def test_force_config_disables_the_agent_and_sighup_reloads_it(plane_node):
    node = plane_node(force=FORCE.format(0))
    cid = node.run_container("forced")
    assert node.containerd.cgroup_cpuset(cid) == "1"
    put_config_map(node.core, DEFAULT, policy_section("1"))
    error = wait_for(lambda: node.annotations().get(CONFIG_ERROR_ANNOTATION), "config-error annotation")
    assert "--force-config" in error and DEFAULT in error
    assert node.probe().returncode == 1
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
