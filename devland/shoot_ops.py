"""Plain functions for the real-Gardener e2e suite: Shoot operations on the garden and node checks.

The spec.extensions logic itself lives in hacks/shoot_extensions.py (shared with the hack scripts);
this module applies it with kubectl and adds waiting, hibernation, deletion, the admin kubeconfig
and running commands on a shoot node through a privileged hostPID pod and nsenter.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Protocol

from .kube import Kube
from .waiting import wait_until  # noqa: F401 - scenarios call shoot_ops.wait_until

REPO = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("shoot_extensions", REPO / "hacks" / "shoot_extensions.py")
shoot_extensions = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(shoot_extensions)  # type: ignore[union-attr]

EXTENSION_TYPE = shoot_extensions.EXTENSION_TYPE
UNIT = "cri-resource-manager"
RELAY_ENDPOINT = "unix:///var/run/cri-resmgr/cri-resmgr.sock"
CONTAINERD_ENDPOINT = "unix:///run/containerd/containerd.sock"


# ----- Shoot spec ---------------------------------------------------------------------------

def get_shoot(garden: Kube, namespace: str, name: str) -> dict:
    return garden.get_json("shoot", name, "-n", namespace)


def _patch_shoot(garden: Kube, namespace: str, name: str, patch: dict | None) -> bool:
    if patch is None:
        return False
    garden.run("-n", namespace, "patch", "shoot", name, "--type", "merge", "-p", json.dumps(patch))
    return True


def enable_extension(garden: Kube, namespace: str, name: str, provider_config: dict | None = None) -> bool:
    """Enable cri-resmgr in the Shoot; True when the Shoot was patched (False: already enabled)."""
    shoot = get_shoot(garden, namespace, name)
    exts = shoot_extensions.enabled_extensions(shoot, provider_config)
    return _patch_shoot(garden, namespace, name, shoot_extensions.merge_patch(shoot, exts))


def disable_extension(garden: Kube, namespace: str, name: str, *, keep_entry: bool = False) -> bool:
    """Disable cri-resmgr in the Shoot; True when the Shoot was patched (False: already disabled)."""
    shoot = get_shoot(garden, namespace, name)
    exts = shoot_extensions.disabled_extensions(shoot, keep_entry=keep_entry)
    return _patch_shoot(garden, namespace, name, shoot_extensions.merge_patch(shoot, exts))


def set_hibernation(garden: Kube, namespace: str, name: str, enabled: bool) -> None:
    patch = {"spec": {"hibernation": {"enabled": enabled}}}
    garden.run("-n", namespace, "patch", "shoot", name, "--type", "merge", "-p", json.dumps(patch))


def trigger_reconcile(garden: Kube, namespace: str, name: str) -> None:
    garden.run("-n", namespace, "annotate", "--overwrite", "shoot", name, "gardener.cloud/operation=reconcile")


def shoot_reconciled(shoot: dict) -> tuple[bool, str]:
    """Whether gardenlet finished the Shoot's current spec: (done, reason when not)."""
    meta, status = shoot.get("metadata", {}), shoot.get("status") or {}
    if (meta.get("annotations") or {}).get("gardener.cloud/operation"):
        return False, "operation annotation not yet picked up"
    if status.get("observedGeneration") != meta.get("generation"):
        return False, f"observedGeneration {status.get('observedGeneration')} != generation {meta.get('generation')}"
    op = status.get("lastOperation") or {}
    if op.get("state") != "Succeeded":
        return False, f"lastOperation {op.get('type')} {op.get('state')} {op.get('progress')}%: " \
                      f"{op.get('description', '')}"
    return True, ""


def wait_shoot_reconciled(garden: Kube, namespace: str, name: str, timeout: float = 1800) -> None:
    wait_until(f"shoot {namespace}/{name} reconciled", lambda: shoot_reconciled(get_shoot(garden, namespace, name)),
               timeout)


def delete_shoot(garden: Kube, namespace: str, name: str, timeout: float = 1800) -> None:
    """Delete with Gardener's deletion confirmation and wait until the Shoot is gone."""
    garden.run("-n", namespace, "annotate", "--overwrite", "shoot", name, "confirmation.gardener.cloud/deletion=true")
    garden.run("-n", namespace, "delete", "shoot", name, "--wait=false")

    def gone() -> tuple[bool, str]:
        r = garden.run("-n", namespace, "get", "shoot", name, "-o", "name", check=False)
        return (r.returncode != 0 and "NotFound" in r.stderr), "shoot still exists"
    wait_until(f"shoot {namespace}/{name} deleted", gone, timeout)


def admin_kubeconfig(garden: Kube, namespace: str, name: str, out: Path, expiration: int = 3600) -> Path:
    """An admin kubeconfig through the shoots/adminkubeconfig subresource (as hacks/export-shoot-kubeconfig.sh)."""
    req = {"apiVersion": "authentication.gardener.cloud/v1alpha1", "kind": "AdminKubeconfigRequest",
           "spec": {"expirationSeconds": expiration}}
    r = garden.run("create", "--raw", f"/apis/core.gardener.cloud/v1beta1/namespaces/{namespace}/shoots/{name}"
                   "/adminkubeconfig", "-f", "-", input=json.dumps(req))
    out.write_bytes(base64.b64decode(json.loads(r.stdout)["status"]["kubeconfig"]))
    out.chmod(0o600)
    return out


# ----- nodes --------------------------------------------------------------------------------

def debug_pod_manifest(node: str, name: str, image: str, namespace: str = "kube-system") -> dict:
    """A privileged hostPID pod pinned to ``node`` that commands reach the host through with nsenter."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "cri-resmgr-e2e-debug"}},
        "spec": {"nodeName": node, "hostPID": True, "restartPolicy": "Never",
                 "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "debug", "image": image, "command": ["sleep", "7200"],
                                 "securityContext": {"privileged": True}}]},
    }


class NodeRunner(Protocol):
    """Runs shell scripts in a node's host namespaces (a shoot node, or a local test node)."""

    node: str

    def run(self, script: str, check: bool = False) -> subprocess.CompletedProcess: ...


class NodeShell:
    """Runs commands in the host namespaces of one shoot node."""

    def __init__(self, shoot: Kube, node: str, image: str):
        self.shoot, self.node = shoot, node
        # Unique per use: the previous check's pod may still be terminating.
        self.pod = f"cri-resmgr-e2e-{uuid.uuid4().hex[:10]}"
        self.shoot.run("apply", "-f", "-", input=json.dumps(debug_pod_manifest(node, self.pod, image)))
        self.shoot.run("-n", "kube-system", "wait", "--for=condition=Ready", f"pod/{self.pod}", "--timeout=300s",
                       timeout=330)

    def run(self, script: str, check: bool = False) -> subprocess.CompletedProcess:
        return self.shoot.run("-n", "kube-system", "exec", self.pod, "--", "nsenter", "-t", "1", "-m", "-u", "-i",
                              "-n", "-p", "--", "sh", "-c", script, check=check)

    def close(self) -> None:
        self.shoot.run("-n", "kube-system", "delete", "pod", self.pod, "--wait=false", check=False)


def kubelet_endpoint(cmdline: list[str], config_text: str = "") -> str:
    """Kubelet's effective runtime endpoint: the last --container-runtime-endpoint flag, else the
    KubeletConfiguration's containerRuntimeEndpoint, else kubelet's default."""
    value = None
    for i, arg in enumerate(cmdline):
        if arg.startswith("--container-runtime-endpoint="):
            value = arg.split("=", 1)[1]
        elif arg == "--container-runtime-endpoint" and i + 1 < len(cmdline):
            value = cmdline[i + 1]
    if value is None:
        import yaml

        cfg = yaml.safe_load(config_text) if config_text.strip() else None
        value = (cfg or {}).get("containerRuntimeEndpoint") if isinstance(cfg, dict) else None
    return normalize_endpoint(value or CONTAINERD_ENDPOINT)


def normalize_endpoint(endpoint: str) -> str:
    """unix:// form with /var/run folded to /run (one is a symlink to the other on every distro)."""
    if not endpoint.startswith("unix://"):
        endpoint = "unix://" + endpoint
    path = endpoint[len("unix://"):]
    if path.startswith("/var/run/"):
        path = path[len("/var"):]
    return "unix://" + path


def node_kubelet_endpoint(node: NodeRunner) -> str:
    """The running kubelet's endpoint (what it really uses, not what a file on disk says)."""
    r = node.run("pid=$(pidof kubelet) && tr '\\0' '\\n' </proc/$pid/cmdline", check=True)
    args = r.stdout.splitlines()
    config = ""
    for i, arg in enumerate(args):
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else (
            args[i + 1] if arg == "--config" and i + 1 < len(args) else None)
        if path:
            config = node.run(f"cat {shlex.quote(path)}").stdout
    return kubelet_endpoint(args[1:], config)


def node_state(node: NodeRunner) -> dict:
    """What the e2e assertions look at on a node."""
    status = node.run(f"systemctl status --no-pager {UNIT}")
    unit_file = node.run(f"systemctl list-unit-files --no-legend {UNIT}.service")
    return {"active": node.run(f"systemctl is-active {UNIT}").stdout.strip(),
            "status_rc": status.returncode, "status": status.stdout,
            "unit_installed": UNIT in unit_file.stdout,
            "kubelet_endpoint": node_kubelet_endpoint(node)}


def _state_or_reason(node: NodeRunner) -> tuple[dict | None, str]:
    try:
        return node_state(node), ""
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # e.g. kubelet restarting, pod being evicted
        return None, f"{node.node}: {e}"


def installed_check(node: NodeRunner):
    def check() -> tuple[bool, str]:
        s, why = _state_or_reason(node)
        if s is None:
            return False, why
        ok = s["active"] == "active" and s["status_rc"] == 0 and \
            s["kubelet_endpoint"] == normalize_endpoint(RELAY_ENDPOINT)
        return ok, f"{node.node}: unit {s['active']}, kubelet on {s['kubelet_endpoint']}"
    return check


def removed_check(node: NodeRunner):
    def check() -> tuple[bool, str]:
        s, why = _state_or_reason(node)
        if s is None:
            return False, why
        ok = not s["unit_installed"] and s["kubelet_endpoint"] == normalize_endpoint(CONTAINERD_ENDPOINT)
        return ok, f"{node.node}: unit installed={s['unit_installed']}, kubelet on {s['kubelet_endpoint']}"
    return check


def shoot_nodes(shoot: Kube, pools: list[str] | None = None) -> list[str]:
    items = shoot.get_json("nodes")["items"]
    return sorted(n["metadata"]["name"] for n in items
                  if pools is None or n["metadata"].get("labels", {}).get("worker.gardener.cloud/pool") in pools)


CONFIG_SOURCE = "cri-resource-manager.intel.com/config-source"
CONFIG_ERROR = "cri-resource-manager.intel.com/config-error"


def agent_config_applied(node_obj: dict, configmap: str = "cri-resmgr-config.default") -> tuple[bool, str]:
    """Whether cri-resmgr-agent reports ``configmap`` applied on the Node (its annotations)."""
    ann = node_obj.get("metadata", {}).get("annotations") or {}
    name = node_obj.get("metadata", {}).get("name", "?")
    if ann.get(CONFIG_ERROR):
        return False, f"{name}: agent reports {ann[CONFIG_ERROR]}"
    source = ann.get(CONFIG_SOURCE, "")
    if not source.startswith(f"kube-system/{configmap}@"):
        return False, f"{name}: config source is {source or 'not reported'}, want kube-system/{configmap}"
    return True, ""
