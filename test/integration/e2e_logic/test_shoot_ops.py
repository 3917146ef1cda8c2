"""The e2e suite's Shoot logic without a Gardener: enable/disable on every shape of spec.extensions
against the local seed API (a schema-less Shoot CRD stands in for Gardener's aggregated Shoot API),
and the pure helpers that judge Shoot and node state."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from integration.extension.test_extension_hacks import SHOOT_CRD

from devland import shoot_ops

pytestmark = pytest.mark.integration

OURS = shoot_ops.EXTENSION_TYPE
PC_OLD = {"configs": {"default": "policy:\n  Active: none\n"}}
PC_NEW = {"workerPools": ["cpu-pinned"], "configs": {"default": "policy:\n  Active: topology-aware\n"}}
OTHER = {"type": "shoot-dns-service", "providerConfig": {"x": 1}}
ABSENT = object()  # spec.extensions not set at all

# (shape of spec.extensions, expected after enable without providerConfig, after enable with PC_NEW,
#  after disable)
SHAPES = {
    "missing": (ABSENT, [{"type": OURS}], [{"type": OURS, "providerConfig": PC_NEW}], None),
    "null": (None, [{"type": OURS}], [{"type": OURS, "providerConfig": PC_NEW}], None),
    "empty": ([], [{"type": OURS}], [{"type": OURS, "providerConfig": PC_NEW}], []),
    "others": ([OTHER, {"type": "b"}], [OTHER, {"type": "b"}, {"type": OURS}],
               [OTHER, {"type": "b"}, {"type": OURS, "providerConfig": PC_NEW}], [OTHER, {"type": "b"}]),
    "ours-bare": ([{"type": OURS}, OTHER], [{"type": OURS}, OTHER],
                  [{"type": OURS, "providerConfig": PC_NEW}, OTHER], [OTHER]),
    "ours-with-config": ([OTHER, {"type": OURS, "providerConfig": PC_OLD}],
                         [OTHER, {"type": OURS, "providerConfig": PC_OLD}],
                         [OTHER, {"type": OURS, "providerConfig": PC_NEW}], [OTHER]),
    "ours-disabled": ([{"type": OURS, "disabled": True, "providerConfig": PC_OLD}, OTHER],
                      [{"type": OURS, "providerConfig": PC_OLD}, OTHER],
                      [{"type": OURS, "providerConfig": PC_NEW}, OTHER], [OTHER]),
    "ours-twice": ([{"type": OURS, "providerConfig": PC_OLD}, OTHER, {"type": OURS}],
                   [{"type": OURS, "providerConfig": PC_OLD}, OTHER],
                   [{"type": OURS, "providerConfig": PC_NEW}, OTHER], [OTHER]),
}


@pytest.fixture(scope="module")
def garden(seed_api, tools):
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(SHOOT_CRD))
    seed_api.kubectl("wait", "--for=condition=Established", "crd/shoots.core.gardener.cloud")
    kube = shoot_ops.Kube(tools.kubectl, seed_api.kubeconfig)
    kube.namespace = seed_api.create_shoot_namespace("garden-e2elogic")  # type: ignore[attr-defined]
    return kube


def make_shoot(garden, name: str, extensions) -> None:
    spec = {"provider": {"type": "local"}}
    if extensions is not ABSENT:
        spec["extensions"] = extensions
    garden.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
        "metadata": {"name": name, "namespace": garden.namespace}, "spec": spec}))


def extensions_of(garden, name: str):
    return shoot_ops.get_shoot(garden, garden.namespace, name)["spec"].get("extensions")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_enable_disable_every_shape(garden, shape):
    start, enabled, enabled_pc, disabled = SHAPES[shape]
    ns, name = garden.namespace, f"s-{shape}"
    make_shoot(garden, name, start)

    shoot_ops.enable_extension(garden, ns, name)
    assert extensions_of(garden, name) == enabled
    # Enabling again is a no-op: no patch at all.
    assert shoot_ops.enable_extension(garden, ns, name) is False
    assert shoot_ops.enable_extension(garden, ns, name, PC_NEW) is True
    assert extensions_of(garden, name) == enabled_pc

    assert shoot_ops.disable_extension(garden, ns, name) is True
    assert extensions_of(garden, name) == [e for e in enabled_pc if e["type"] != OURS]
    assert shoot_ops.disable_extension(garden, ns, name) is False

    # Disabling the starting shape directly.
    make_shoot(garden, name + "-d", start)
    changed = shoot_ops.disable_extension(garden, ns, name + "-d")
    assert extensions_of(garden, name + "-d") == disabled
    assert changed == (disabled != start and not (start is ABSENT and disabled is None))


def test_disable_keeping_the_entry_and_reenable_keeps_the_config(garden):
    ns = garden.namespace
    make_shoot(garden, "keep", [OTHER, {"type": OURS, "providerConfig": PC_OLD}])
    assert shoot_ops.disable_extension(garden, ns, "keep", keep_entry=True)
    assert extensions_of(garden, "keep") == [OTHER, {"type": OURS, "providerConfig": PC_OLD, "disabled": True}]
    assert shoot_ops.enable_extension(garden, ns, "keep")
    assert extensions_of(garden, "keep") == [OTHER, {"type": OURS, "providerConfig": PC_OLD}]
    make_shoot(garden, "keep-none", None)
    assert shoot_ops.disable_extension(garden, ns, "keep-none", keep_entry=True)
    assert extensions_of(garden, "keep-none") == [{"type": OURS, "disabled": True}]


def test_concurrent_change_is_not_overwritten(garden):
    """The patch carries the resourceVersion it was computed from: a Shoot changed in between is a conflict."""
    ns = garden.namespace
    make_shoot(garden, "race", [OTHER])
    stale = shoot_ops.get_shoot(garden, ns, "race")
    garden.run("-n", ns, "patch", "shoot", "race", "--type", "merge",
               "-p", json.dumps({"spec": {"extensions": [OTHER, {"type": "added-meanwhile"}]}}))
    patch = shoot_ops.shoot_extensions.merge_patch(stale, shoot_ops.shoot_extensions.enabled_extensions(stale))
    r = garden.run("-n", ns, "patch", "shoot", "race", "--type", "merge", "-p", json.dumps(patch), check=False)
    assert r.returncode != 0 and ("Conflict" in r.stderr or "modified" in r.stderr), r.stderr
    assert extensions_of(garden, "race") == [OTHER, {"type": "added-meanwhile"}]
    assert shoot_ops.enable_extension(garden, ns, "race")
    assert extensions_of(garden, "race") == [OTHER, {"type": "added-meanwhile"}, {"type": OURS}]


@pytest.mark.parametrize("index, bad, field", [
    (0, {"a": 1}, "spec.extensions must be a list"),
    (1, ["x"], "spec.extensions[0]"),
    (2, [OTHER, {"providerConfig": {}}], "spec.extensions[1]"),
])
def test_malformed_extensions_are_refused_and_nothing_changes(garden, index, bad, field):
    ns, name = garden.namespace, f"bad-{index}"
    make_shoot(garden, name, bad)
    for op in (shoot_ops.enable_extension, shoot_ops.disable_extension):
        with pytest.raises(shoot_ops.shoot_extensions.ShootShapeError, match=field.replace("[", r"\[")):
            op(garden, ns, name)
    assert extensions_of(garden, name) == bad
    # The filter the hack scripts use says the same and exits 2.
    r = subprocess.run([sys.executable, str(shoot_ops.REPO / "hacks/shoot_extensions.py"), "enable"],
                       input=json.dumps(shoot_ops.get_shoot(garden, ns, name)), capture_output=True, text=True)
    assert r.returncode == 2 and field in r.stderr and r.stdout == ""


def test_provider_config_must_be_a_mapping(tmp_path):
    with pytest.raises(shoot_ops.shoot_extensions.ShootShapeError, match="providerConfig must be a mapping"):
        shoot_ops.shoot_extensions.enabled_extensions({"spec": {}}, ["not", "a", "mapping"])
    pc = tmp_path / "pc.yaml"
    pc.write_text("- a list\n")
    r = subprocess.run([sys.executable, str(shoot_ops.REPO / "hacks/shoot_extensions.py"), "enable",
                        "--provider-config", str(pc)], input='{"spec": {}}', capture_output=True, text=True)
    assert r.returncode == 2 and "providerConfig must be a mapping" in r.stderr


def test_delete_shoot_confirms_and_waits(garden):
    make_shoot(garden, "gone", [])
    shoot_ops.delete_shoot(garden, garden.namespace, "gone", timeout=60)
    r = garden.run("-n", garden.namespace, "get", "shoot", "gone", check=False)
    assert "NotFound" in r.stderr


def test_debug_pod_is_accepted_by_the_api(garden):
    # No controller-manager here creates the namespace's default ServiceAccount that admission looks up.
    garden.run("-n", garden.namespace, "create", "serviceaccount", "default")
    manifest = shoot_ops.debug_pod_manifest("node-1", "cri-resmgr-e2e-x", "busybox:1.36", garden.namespace)
    r = garden.run("apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest))
    pod = json.loads(r.stdout)
    assert pod["spec"]["hostPID"] and pod["spec"]["containers"][0]["securityContext"]["privileged"]


def test_shoot_reconciled():
    base = {"metadata": {"generation": 3}, "status": {"observedGeneration": 3, "lastOperation": {
        "type": "Reconcile", "state": "Succeeded", "progress": 100}}}
    assert shoot_ops.shoot_reconciled(base) == (True, "")
    stale = json.loads(json.dumps(base))
    stale["status"]["observedGeneration"] = 2
    assert shoot_ops.shoot_reconciled(stale)[0] is False
    running = json.loads(json.dumps(base))
    running["status"]["lastOperation"].update(state="Processing", progress=40)
    done, reason = shoot_ops.shoot_reconciled(running)
    assert not done and "Processing 40%" in reason
    annotated = json.loads(json.dumps(base))
    annotated["metadata"]["annotations"] = {"gardener.cloud/operation": "reconcile"}
    assert shoot_ops.shoot_reconciled(annotated)[0] is False
    assert shoot_ops.shoot_reconciled({"metadata": {"generation": 1}})[0] is False


@pytest.mark.parametrize("cmdline, config, want", [
    (["--config=/var/lib/kubelet/config/kubelet", "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
      "--container-runtime-endpoint=unix:///var/run/cri-resmgr/cri-resmgr.sock"], "",
     "unix:///run/cri-resmgr/cri-resmgr.sock"),
    (["--container-runtime-endpoint", "/var/run/cri-resmgr/cri-resmgr.sock"], "", "unix:///run/cri-resmgr/cri-resmgr.sock"),
    (["--config", "/x"], "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///var/run/cri-resmgr/cri-resmgr.sock\n",
     "unix:///run/cri-resmgr/cri-resmgr.sock"),
    (["--container-runtime-endpoint=unix:///run/containerd/containerd.sock"],
     "containerRuntimeEndpoint: unix:///var/run/cri-resmgr/cri-resmgr.sock\n", "unix:///run/containerd/containerd.sock"),
    ([], "", "unix:///run/containerd/containerd.sock"),
])
def test_kubelet_endpoint(cmdline, config, want):
    assert shoot_ops.kubelet_endpoint(cmdline, config) == want


class LocalNode:
    """The e2e node checks' view of a local systemd node (nsenter from the host instead of a pod)."""

    node = "local-node"

    def __init__(self, systemd_node):
        self.systemd_node = systemd_node

    def run(self, script: str, check: bool = False) -> subprocess.CompletedProcess:
        return self.systemd_node.run(script, check=check)


def start_fake_kubelet(systemd_node, endpoint: str) -> None:
    # A process whose name is "kubelet" with kubelet's flag (python3 ignores args after -c's code).
    systemd_node.run("ln -sf /usr/bin/python3 /usr/local/bin/kubelet")
    systemd_node.run(["systemd-run", "--unit", "fake-kubelet", "/usr/local/bin/kubelet", "-c",
                      "import time; time.sleep(1e9)", f"--container-runtime-endpoint={endpoint}"])
    shoot_ops.wait_until("fake kubelet", lambda: (systemd_node.run("pidof kubelet", check=False).returncode == 0,
                                                  "not running"), 30, interval=0.5)


def test_node_checks_on_a_systemd_node(systemd_node):
    node = LocalNode(systemd_node)
    installed, removed = shoot_ops.installed_check(node), shoot_ops.removed_check(node)
    done, why = installed()
    assert not done and "local-node" in why  # no kubelet running: a reason, not an exception

    systemd_node.write_file("/etc/systemd/system/cri-resource-manager.service",
                            "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n")
    systemd_node.systemctl("daemon-reload")
    systemd_node.systemctl("start", "cri-resource-manager")
    start_fake_kubelet(systemd_node, shoot_ops.RELAY_ENDPOINT)
    state = shoot_ops.node_state(node)
    assert state["active"] == "active" and state["status_rc"] == 0 and state["unit_installed"]
    assert "cri-resource-manager.service" in state["status"]
    assert state["kubelet_endpoint"] == "unix:///run/cri-resmgr/cri-resmgr.sock"
    assert installed() == (True, "local-node: unit active, kubelet on unix:///run/cri-resmgr/cri-resmgr.sock")
    assert removed()[0] is False

    # Unit stopped but kubelet still on the relay: neither installed nor removed.
    systemd_node.systemctl("stop", "cri-resource-manager")
    assert installed()[0] is False and removed()[0] is False

    # Uninstalled: unit file gone, kubelet restarted on containerd.
    systemd_node.run("rm /etc/systemd/system/cri-resource-manager.service")
    systemd_node.systemctl("daemon-reload")
    systemd_node.systemctl("stop", "fake-kubelet")
    start_fake_kubelet(systemd_node, "/run/containerd/containerd.sock")
    state = shoot_ops.node_state(node)
    assert not state["unit_installed"] and state["status_rc"] != 0
    assert removed() == (True, "local-node: unit installed=False, kubelet on unix:///run/containerd/containerd.sock")
    assert installed()[0] is False


def test_null_extensions_without_the_api():
    # The API server may drop a null field on create; the functions must handle it either way.
    se = shoot_ops.shoot_extensions
    shoot = {"metadata": {"resourceVersion": "7"}, "spec": {"extensions": None}}
    assert se.merge_patch(shoot, se.enabled_extensions(shoot)) == {
        "metadata": {"resourceVersion": "7"}, "spec": {"extensions": [{"type": OURS}]}}
    assert se.merge_patch(shoot, se.disabled_extensions(shoot)) is None
    assert se.disabled_extensions(shoot, keep_entry=True) == [{"type": OURS, "disabled": True}]


def test_agent_config_applied():
    def node(**ann):
        return {"metadata": {"name": "n1", "annotations": ann}}
    src, err = shoot_ops.CONFIG_SOURCE, shoot_ops.CONFIG_ERROR
    assert shoot_ops.agent_config_applied(node(**{src: "kube-system/cri-resmgr-config.default@123"})) == (True, "")
    done, why = shoot_ops.agent_config_applied(node(**{src: "kube-system/cri-resmgr-config.default@1",
                                                      err: "kube-system/cri-resmgr-config.default@2: bad"}))
    assert not done and "bad" in why
    assert shoot_ops.agent_config_applied(node(**{src: "none"})) == (
        False, "n1: config source is none, want kube-system/cri-resmgr-config.default")
    assert not shoot_ops.agent_config_applied(node(**{src: "kube-system/cri-resmgr-config.default.x@1"}))[0]
    assert not shoot_ops.agent_config_applied({"metadata": {"name": "n1"}})[0]
