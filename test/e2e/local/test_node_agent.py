"""The installer lives with the real gardener-node-agent (issue 25 item 3), on the local landscape, whose nodes
node-agent brings up from their OperatingSystemConfig Secrets (devland/osc.py):

* an in-place OSC change of kubelet's config: node-agent rewrites kubelet.service, removes
  ``kubelet.service.d`` whole (our guard with it), daemon-reloads and restarts kubelet. The supervisor
  writes the guard again; kubelet stays on the relay; no pod is lost.
* an OSC change of containerd's config: node-agent merges it and restarts containerd. The relay rides
  through; the pods keep running; a new pod is placed.
* node-agent updating itself (a new binary from an image, its config under the new version's name):
  kubelet, the relay and the guard are left alone.
* a crash-looping relay: the supervisor's kubelet restarts stay below node-agent's count of 5
  NotReady->Ready toggles in 10 minutes (the Node's NodeReady events, which are those toggles), and
  node-agent never warns.

Times are measured and printed, not asserted (the machine is shared).
"""

from __future__ import annotations

import calendar
import json
import sys
import time

import pytest
from e2e import scenarios
from e2e.targets import LandscapeTarget

from devland import node_agent_image, osc, shoot_ops
from devland.node import NODE_AGENT_VERSION
from devland.node_checks import NodeRunner
from devland.waiting import wait_until
from devland.workloads import exclusive_cpus, guaranteed_pod, wait_pod_running
from installer import node_files

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

INSTALLER = "app.kubernetes.io/name=cri-resmgr-installer"
# gardener v1.149.3 pkg/nodeagent/controller/healthcheck/kubelet.go: the event at the 5th toggle in 10 minutes.
TOGGLE_WARNING = "toggled between NotReady and Ready"
# Gardener's image of node-agent (its image vector), served here by the landscape's registry mirror.
NODE_AGENT_IMAGE = "europe-docker.pkg.dev/gardener-project/releases/gardener/node-agent"
NODE_AGENT_NEXT_VERSION = f"{NODE_AGENT_VERSION}-landscape.1"  # setup step gardener: gardener-node-agent-next


def say(msg: str) -> None:
    print(f"[node-agent {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@pytest.fixture
def target(inside) -> LandscapeTarget:
    return LandscapeTarget(inside)


def unit_pid(n, unit: str) -> str:
    return n.systemctl("show", "-p", "MainPID", "--value", unit).stdout.strip()


def pod_state(shoot, name: str) -> tuple[str, str, int]:
    """(uid, container id, restart count) of a running pod's container."""
    pod = shoot.get_json("pod", name)
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running" and status.get("state", {}).get("running"), pod["status"]
    return pod["metadata"]["uid"], status["containerID"], status["restartCount"]


def guard_identity(n) -> tuple[int, int]:
    """The guard drop-in's (inode, mtime): a removed and rewritten file has another."""
    st = n.path(node_files.KUBELET_GUARD_DROPIN).stat()
    return st.st_ino, st.st_mtime_ns


def guard_loaded(n) -> tuple[bool, str]:
    """The guard is on disk and systemd has loaded it into kubelet.service (a daemon-reload happened)."""
    dropins = n.systemctl("show", "kubelet.service", "-p", "DropInPaths", "--value").stdout
    return (n.exists(node_files.KUBELET_GUARD_DROPIN) and node_files.KUBELET_GUARD_DROPIN in dropins,
            f"kubelet.service drop-ins: {dropins.strip() or 'none'}")


def node_events(shoot, node: str, since: float) -> list[dict]:
    """The Node's events last seen at or after ``since`` (wall clock)."""
    items = shoot.get_json("events", "-A", "--field-selector", f"involvedObject.name={node}")["items"]
    def last(e: dict) -> float:
        return calendar.timegm(time.strptime((e.get("lastTimestamp") or e["eventTime"])[:19], "%Y-%m-%dT%H:%M:%S"))
    return [e for e in items if last(e) >= int(since)]


def ready_toggles(shoot, node: str) -> int:
    """How often the Node went NotReady->Ready so far: kubelet's NodeReady events (one series, counted)."""
    return sum(e.get("count") or 1 for e in node_events(shoot, node, 0) if e["reason"] == "NodeReady")


def installer_pod(shoot, node: str) -> str:
    pods = shoot.get_json("pods", "-n", "kube-system", "-l", INSTALLER, "--field-selector", f"spec.nodeName={node}")
    return pods["items"][0]["metadata"]["name"]


def pod_gone(shoot, name: str) -> tuple[bool, str]:
    """The pod is gone from the API; if not, its phase, deletion mark and container states."""
    got = shoot.run("get", "pod", name, "-o", "json", check=False)
    if got.returncode != 0:
        return True, "gone"
    pod = json.loads(got.stdout)
    states = [(c["name"], list(c.get("state", {}))) for c in pod["status"].get("containerStatuses", [])]
    return False, (f"phase {pod['status'].get('phase')}, deletionTimestamp {pod['metadata'].get('deletionTimestamp')}, "
                   f"containers {states}")


def node_diagnostics(node, pod_uid: str) -> str:
    """What kubelet, containerd and the relay logged lately: the reason a pod is stuck on this node."""
    containers = node.node.run(["crictl", "--runtime-endpoint", shoot_ops.CONTAINERD_ENDPOINT, "ps", "-a"],
                               check=False)
    logs = (("kubelet.service", 60, pod_uid), ("kubelet.service", 30, None), ("containerd.service", 40, None),
            (node_files.UNIT, 40, None))
    return "\n".join([*(f"--- {unit}{f' ({grep})' if grep else ''}:\n{node.journal(unit, lines, grep)}"
                        for unit, lines, grep in logs),
                      f"--- crictl ps -a (containerd):\n{containers.stdout}{containers.stderr[-500:]}"])


def test_the_installer_lives_with_gardener_node_agent(target, inside, tmp_path):
    land = inside
    target.create()
    target.enable(scenarios.provider_config())
    scenarios.assert_nodes(target, installed=True)
    node = land.shoot_nodes[0]
    n, runner = node.node, NodeRunner(node)
    relay = shoot_ops.normalize_endpoint(node_files.RELAY_ENDPOINT)
    # kubelet.service is node-agent's: its unit is exactly the OSC's.
    unit = next(u for u in node.osc["spec"]["units"] if u["name"] == "kubelet.service")
    assert n.read_file("/etc/systemd/system/kubelet.service").decode() == unit["content"]
    wait_until("the kubelet guard", lambda: guard_loaded(n), 60, 1)
    shoot = land.shoot
    shoot.run("apply", "-f", "-", input=json.dumps(guaranteed_pod("lives-with-node-agent", node.name)))
    wait_pod_running(shoot, "lives-with-node-agent")
    before = pod_state(shoot, "lives-with-node-agent")

    # 1. A kubelet-config change in place (a field outside the Secret name's hash).
    guard_before, kubelet_before = guard_identity(n), unit_pid(n, "kubelet.service")
    changed = time.monotonic()
    land.set_osc(node, osc.with_kubelet_config(node.osc, lambda c: {**c, "maxPods": c["maxPods"] - 1}))
    land.wait_osc_applied([node])
    assert unit_pid(n, "kubelet.service") != kubelet_before, "node-agent did not restart kubelet"
    wait_until("the guard written again after node-agent removed kubelet.service.d", lambda: (
        guard_loaded(n)[0] and guard_identity(n) != guard_before, guard_loaded(n)[1]), 120, 0.5)
    say(f"kubelet-config change: guard back {time.monotonic() - changed:.1f}s after the OSC changed "
        "(supervision period 5 s)")
    wait_until("kubelet on the relay", shoot_ops.installed_check(runner), 120, 1)
    assert shoot_ops.node_kubelet_endpoint(runner) == relay
    assert pod_state(shoot, "lives-with-node-agent") == before, "a pod was lost or restarted"

    # 2. A containerd-config change: node-agent merges the plugin values and restarts containerd. (Not an integer
    # value: node-agent v1.149.3 writes it as a TOML float, and containerd 2.4.2 then refuses to start.)
    containerd_before, relay_before = unit_pid(n, "containerd.service"), unit_pid(n, node_files.UNIT)
    plugin = {"path": ["io.containerd.cri.v1.runtime"], "values": {"device_ownership_from_security_context": True}}
    land.set_osc(node, osc.with_containerd_plugin(node.osc, plugin))
    land.wait_osc_applied([node])
    assert "device_ownership_from_security_context = true" in n.read_file("/etc/containerd/config.toml").decode()
    assert unit_pid(n, "containerd.service") != containerd_before, "node-agent did not restart containerd"
    assert unit_pid(n, node_files.UNIT) == relay_before, "the relay restarted with containerd"
    wait_until("kubelet on the relay", shoot_ops.installed_check(runner), 120, 1)
    assert pod_state(shoot, "lives-with-node-agent") == before, "a pod was lost or restarted"
    shoot.run("delete", "pod", "lives-with-node-agent", "--wait=false")
    try:
        wait_until("the first pod gone (its CPUs free for the next)",
                   lambda: pod_gone(shoot, "lives-with-node-agent"), 300, 1)
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{node_diagnostics(node, before[0])}") from err
    shoot.run("apply", "-f", "-", input=json.dumps(guaranteed_pod("after-containerd-restart", node.name)))
    pod = wait_pod_running(shoot, "after-containerd-restart")
    mine, _ = exclusive_cpus(node, pod)
    say(f"containerd restarted by node-agent; the relay ({relay_before}) rode through; a new pod got CPUs {mine}")
    shoot.run("delete", "pod", "after-containerd-restart", "--wait=false")

    # 4. node-agent updates itself: the OSC names a new image of its binary and its config under the new
    # version's name; it pulls the binary through containerd, restarts into it, and the new one finishes the job.
    next_binary = land.tools.cache / "bin" / "gardener-node-agent-next"
    image = f"{NODE_AGENT_IMAGE}:{NODE_AGENT_NEXT_VERSION}"
    land.push_image(node_agent_image.image_archive(next_binary, image, tmp_path / "node-agent-next.tar"))
    agent_before, kubelet_before = unit_pid(n, "gardener-node-agent.service"), unit_pid(n, "kubelet.service")
    guard_before = guard_identity(n)
    land.set_osc(node, osc.with_node_agent_update(node.osc, NODE_AGENT_VERSION, NODE_AGENT_NEXT_VERSION, image))
    land.wait_osc_applied([node])
    assert NODE_AGENT_NEXT_VERSION in n.run([osc.NODE_AGENT_BINARY, "--version"]).stdout
    wait_until("node-agent running its new binary", lambda: (
        unit_pid(n, "gardener-node-agent.service") not in ("0", agent_before)
        and n.run(["readlink", f"/proc/{unit_pid(n, 'gardener-node-agent.service')}/exe"], check=False
                  ).stdout.strip() == osc.NODE_AGENT_BINARY,
        f"pid {unit_pid(n, 'gardener-node-agent.service')} (was {agent_before})"), 60, 1)
    assert unit_pid(n, "kubelet.service") == kubelet_before, "node-agent's update restarted kubelet"
    assert guard_identity(n) == guard_before and shoot_ops.node_kubelet_endpoint(runner) == relay
    say(f"node-agent updated itself to {NODE_AGENT_NEXT_VERSION}; kubelet, the relay and the guard untouched")

    # 3. A relay that serves for 45 s after every start, then is silent for 40 s and exits: the supervisor falls
    # back (silent > 30 s), systemd restarts it, the supervisor recovers, and so on; each restarts kubelet.
    boot_id = n.read_file("/proc/sys/kernel/random/boot_id")
    real = f"{node_files.BINARY}.real"
    n.run(["cp", "-P", node_files.BINARY, real])
    # (The build runs the command its first argument names; -P above keeps the stable path a symlink into the release.)
    wrapper = f'#!/bin/sh\ntimeout 45 {real} cri-resmgr "$@"\nsleep 40\nexit 1\n'
    n.write_file(f"{node_files.BINARY}.new", wrapper, mode=0o755)
    n.run(["mv", "-f", f"{node_files.BINARY}.new", node_files.BINARY])
    toggles_before = ready_toggles(shoot, node.name)
    t0 = time.time()
    n.systemctl("restart", node_files.UNIT)

    def budget_holds_recovery() -> tuple[bool, str]:
        log = shoot.run("logs", "-n", "kube-system", installer_pod(shoot, node.name), "--tail=200", check=False).stdout
        decisions = [line for line in log.splitlines() if "supervisor" in line]
        waiting = [line for line in decisions if "kubelet restarts per" in line]
        return bool(waiting), f"last supervisor lines: {decisions[-2:]}"
    wait_until("the supervisor holding a recovery back for node-agent's toggle count", budget_holds_recovery,
               900, 5)
    toggles = ready_toggles(shoot, node.name) - toggles_before
    journal = n.run(["journalctl", "-u", "kubelet.service", "--since", f"@{int(t0)}", "-o", "cat", "--no-pager"],
                    check=False).stdout
    kubelet_starts = journal.count("Started kubelet.service")  # systemd's line, one per start
    warnings = [e["message"] for e in node_events(shoot, node.name, t0) if TOGGLE_WARNING in e.get("message", "")]
    say(f"crash-looping relay for {time.time() - t0:.0f}s: {kubelet_starts} kubelet starts, {toggles} "
        "NotReady->Ready toggles (node-agent warns at 5 in 10 min)")
    assert toggles < 5 and kubelet_starts < 5, (toggles, kubelet_starts)
    assert not warnings, warnings
    assert n.read_file("/proc/sys/kernel/random/boot_id") == boot_id, "the node rebooted"
    assert shoot_ops.node_kubelet_endpoint(runner) == shoot_ops.normalize_endpoint(shoot_ops.CONTAINERD_ENDPOINT)

    # The fix: the good binary back, and a new installer pod (a new supervisor) takes the node back to the relay.
    n.run(["mv", "-f", real, node_files.BINARY])
    shoot.run("delete", "pod", "-n", "kube-system", "-l", INSTALLER, "--field-selector", f"spec.nodeName={node.name}")
    wait_until("kubelet back on the relay", shoot_ops.installed_check(runner), 300, 2)
    target.delete()
