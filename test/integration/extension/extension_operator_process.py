"""Run gardener-extension-cri-resmgr as a real process against the test seed API."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devland.procs import Process

REPO = Path(__file__).resolve().parents[3]
GROUP, VERSION = "extensions.gardener.cloud", "v1alpha1"
MR_NAME = "extension-runtime-cri-resmgr"
FINALIZER = "extensions.gardener.cloud/cri-resmgr-extension"


class Operator:
    """One operator process watching the namespaces that match ``pattern`` (None: cluster-wide).

    Without leader election unless ``leader_election`` names the Lease's namespace: then it competes for
    the Lease there, with short durations (lease 4 s, renew deadline 3 s, retry 1 s) unless
    ``extra_args`` sets them."""

    def __init__(self, seed_api: Any, tools: Any, workdir: Path, pattern: str | None, *,
                 configmap_namespace: str | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None, name: str = "operator",
                 leader_election: str | None = None) -> None:
        self.seed_api = seed_api
        self.workdir = workdir
        self.name = name
        self.args = [sys.executable, "-m", "extension.cli", "--kubeconfig", seed_api.kubeconfig,
                     "--helm", tools.helm, *(["--namespace", pattern] if pattern else []), "--log-format", "json",
                     "--health-interval", "1", "--heartbeat-interval", "1", "--poll-interval", "0.5",
                     "--retry-delay-min", "0.5", "--retry-delay-max", "2", "--max-concurrent-reconciles", "4",
                     "--log-level", (env or {}).get("EXTENSION_TEST_LOG_LEVEL")
                     or os.environ.get("EXTENSION_TEST_LOG_LEVEL", "info"),
                     *(extra_args or [])]
        if leader_election is None:
            self.args.append("--no-leader-election")
        else:
            self.args += ["--leader-election-namespace", leader_election]
            for flag, seconds in (("--leader-election-lease-duration", "4"),
                                  ("--leader-election-renew-deadline", "3"),
                                  ("--leader-election-retry-period", "1")):
                if flag not in (extra_args or []):
                    self.args += [flag, seconds]
        self.env = dict(os.environ)
        self.env.pop("KUBECONFIG", None)
        if configmap_namespace:
            self.env["EXTENSION_CONFIGMAP_NAMESPACE"] = configmap_namespace
        self.env.update(env or {})
        self.process: Process | None = None

    def start(self) -> Operator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process(self.name, self.args, self.workdir, env=self.env, cwd=str(REPO))
        return self

    def stop(self, sig: int | None = None) -> None:
        if self.process is not None:
            if sig is None:
                self.process.stop()
            else:
                self.process.stop(timeout=5, sig=sig)

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        if self.process is None:
            return out
        for line in self.process.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"raw": line})
        return out

    def log_tail(self) -> str:
        return self.process.log_tail(60) if self.process else ""


class SeedClient:
    """Small helpers over the kubernetes client for the tests."""

    def __init__(self, seed_api: Any) -> None:
        from kubernetes import client

        self.seed_api = seed_api
        self.api_client = seed_api.api_client()
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)

    def new_namespace(self, prefix: str) -> str:
        ns = self.seed_api.create_shoot_namespace(f"{prefix}-{uuid.uuid4().hex[:6]}")
        self.give_shoot_access(ns)
        return ns

    def give_shoot_access(self, namespace: str) -> None:
        """The test API server is the shoot too: the extension reads its nodes' records through the generic
        token kubeconfig (gardenlet's part) and a filled-in shoot-access token (the token-requestor's part),
        both played here (devland/shoot_access.py), with the ServiceAccount and RBAC of the installation chart."""
        from devland import shoot_access
        from extension import node_proof

        if not getattr(self, "_shoot_rbac", False):
            self.seed_api.kubectl("create", "serviceaccount", node_proof.SHOOT_ACCESS_SERVICE_ACCOUNT,
                                  "-n", "kube-system", check=False)
            self.seed_api.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                        "items": shoot_rbac(self.seed_api.tools)}))
            self._shoot_rbac = True
        self.seed_api.kubectl("apply", "-f", "-", input=json.dumps(
            shoot_access.generic_kubeconfig_secret(namespace, self.seed_api.url, None)))
        self.core.create_namespaced_secret(namespace, node_proof.access_secret_body(namespace))
        token = self.seed_api.kubectl("create", "token", node_proof.SHOOT_ACCESS_SERVICE_ACCOUNT, "-n", "kube-system",
                                      "--duration", "2h").stdout.strip()
        shoot_access.fill_access_token(self.core, namespace, node_proof.SHOOT_ACCESS_SECRET, token)

    def create_extension(self, namespace: str, provider_config: dict | None = None, *,
                         annotations: dict[str, str] | None = None, name: str = "cri-resmgr") -> dict:
        body: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Extension",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"gardener.cloud/operation": "reconcile"} if annotations is None
                         else annotations},
            "spec": {"type": "cri-resmgr-extension"},
        }
        if provider_config is not None:
            body["spec"]["providerConfig"] = provider_config
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "extensions", body)

    def extension(self, namespace: str, name: str = "cri-resmgr") -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "extensions", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def patch_extension(self, namespace: str, patch: dict, name: str = "cri-resmgr") -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "extensions", name, patch)

    def annotate(self, namespace: str, op: str | None, name: str = "cri-resmgr") -> dict:
        return self.patch_extension(namespace, {"metadata": {"annotations": {"gardener.cloud/operation": op}}}, name)

    def delete_extension(self, namespace: str, name: str = "cri-resmgr") -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "extensions", name)

    def managed_resource(self, namespace: str, name: str = MR_NAME) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                "resources.gardener.cloud", "v1alpha1", namespace, "managedresources", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def patch_managed_resource(self, namespace: str, patch: dict, name: str = MR_NAME) -> dict:
        return self.custom.patch_namespaced_custom_object(
            "resources.gardener.cloud", "v1alpha1", namespace, "managedresources", name, patch)

    def set_mr_conditions(self, namespace: str, applied: str = "True", healthy: str = "True",
                          progressing: str = "False", message: str = "", name: str = MR_NAME) -> None:
        """Write status the way gardener-resource-manager would, for the current generation."""
        mr = self.managed_resource(namespace, name)
        assert mr is not None, f"managed resource {namespace}/{name} missing"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def cond(t: str, s: str, reason: str) -> dict:
            return {"type": t, "status": s, "reason": reason, "message": message or reason,
                    "lastTransitionTime": now, "lastUpdateTime": now}

        status = {"observedGeneration": mr["metadata"]["generation"], "conditions": [
            cond("ResourcesApplied", applied, "ApplySucceeded" if applied == "True" else "ApplyFailed"),
            cond("ResourcesHealthy", healthy, "ResourcesHealthy" if healthy == "True" else "DaemonSetUnhealthy"),
            cond("ResourcesProgressing", progressing,
                 "ResourcesRolledOut" if progressing == "False" else "DaemonSetProgressing"),
        ]}
        self.custom.patch_namespaced_custom_object_status(
            "resources.gardener.cloud", "v1alpha1", namespace, "managedresources", name, {"status": status})

    def secret(self, namespace: str, name: str):
        return self.core.read_namespaced_secret(name, namespace)

    def rendered_objects(self, namespace: str, name: str = MR_NAME) -> list[dict]:
        import base64

        import yaml

        mr = self.managed_resource(namespace, name)
        assert mr is not None
        objs: list[dict] = []
        for ref in mr["spec"]["secretRefs"]:
            secret = self.secret(namespace, ref["name"])
            for value in (secret.data or {}).values():
                objs.extend(d for d in yaml.safe_load_all(base64.b64decode(value)) if d)
        return objs

    def create_configs_configmap(self, namespace: str, data: dict[str, str]) -> None:
        from kubernetes import client

        self.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="gardener-extension-cri-resmgr-configs"), data=data))


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60, operator: Operator | None = None,
             interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        if operator is not None and operator.process is not None and not operator.process.alive():
            raise AssertionError(f"operator died while waiting for {what}:\n{operator.log_tail()}")
        time.sleep(interval)
    tail = operator.log_tail() if operator else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last})\n{tail}")


def shoot_rbac(tools: Any) -> list[dict]:
    """The installation chart's RBAC for the extension's shoot-access ServiceAccount."""
    import subprocess

    import yaml

    text = subprocess.run([tools.helm, "template", "cri-resmgr-installation",
                           str(REPO / "charts" / "internal" / "cri-resmgr-installation"), "--namespace", "kube-system"],
                          capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(text) if d and d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role",
                                                                        "RoleBinding")
            and d["metadata"]["name"] == "extension-cri-resmgr"]


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}
