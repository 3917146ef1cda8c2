"""A node's configuration plane for real: cri-resmgr (relay + resource manager + config socket) in front of
the shared containerd, cri-resmgr-agent as its own process against the real kube-apiserver, and a Node object."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devland.procs import Process, free_port, unix_socket_answers
from resmgr.agent.rollout import is_rollout_config_map

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
NAMESPACE = "kube-system"
CRD = HERE / "adjustment-crd.yaml"
ADJ = ("criresmgr.intel.com", "v1alpha1", NAMESPACE, "adjustments")

TOPOLOGY_AWARE_RESERVED_0 = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n"
STATIC_RESERVED_0 = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0\n"


def policy_section(reserved: str, active: str = "topology-aware") -> dict[str, str]:
    """A ConfigMap's data in cri-resource-manager's form: one key per config section."""
    return {"policy": f"Active: {active}\nReservedResources:\n  cpu: cpuset:{reserved}\n"}


def wait_for(check: Callable[[], Any], what: str, timeout: float = 90.0, interval: float = 0.05) -> Any:
    """Poll until ``check()`` is truthy (not a timing assertion: the limit only bounds a hung test)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - "not yet"
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached in {timeout:.0f}s (last: {last!r})")


class PlaneNode:
    """One simulated node: its Node object, its cri-resmgr and its agent."""

    def __init__(self, seed_api: Any, containerd: Any, fallback: str = TOPOLOGY_AWARE_RESERVED_0,
                 force: str | None = None, metrics: bool = False) -> None:
        self.seed_api = seed_api
        self.containerd = containerd
        self.name = f"worker-{uuid.uuid4().hex[:6]}"
        self.dir = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))  # short: unix socket paths
        self.relay_dir = self.dir / "state"
        self.relay_socket = str(self.dir / "relay.sock")
        self.config_socket = str(self.dir / "config.sock")
        self.agent_socket = str(self.dir / "agent.sock")
        # metrics: cri-resmgr serves /metrics on this socket and the agent forwards it on metrics_port.
        self.metrics_socket = str(self.dir / "metrics.sock") if metrics else ""
        self.metrics_port = free_port() if metrics else 0
        self.fallback = self.dir / "fallback.cfg"
        self.fallback.write_text(fallback)
        self.force = self.dir / "force.cfg"
        if force is not None:
            self.force.write_text(force)
        self.api = seed_api.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.resmgr: Process | None = None
        self.pod_of: dict[str, str] = {}
        self.agent: Process | None = None

    # processes ----------------------------------------------------------------------------
    def start(self, labels: dict[str, str] | None = None) -> PlaneNode:
        self.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=self.name, labels=labels or {})))
        self.start_resmgr()
        self.start_agent()
        return self

    def start_resmgr(self) -> None:
        self.resmgr = Process("cri-resmgr", [
            str(BIN / "cri-resmgr"),
            "--relay-socket", self.relay_socket, "--runtime-socket", self.containerd.socket,
            "--relay-dir", str(self.relay_dir), "--pid-file", "", "--fallback-config", str(self.fallback),
            "--config-socket", self.config_socket, "--agent-socket", self.agent_socket,
            *(["--force-config", str(self.force)] if self.force.exists() else []),
            *(["--metrics-address", "off", "--metrics-socket", self.metrics_socket] if self.metrics_socket else [])],
            self.dir, env={**os.environ, "NODE_NAME": self.name})
        self.resmgr.wait_until(lambda: unix_socket_answers(self.config_socket), "config socket", 90)

    def start_agent(self) -> None:
        self.agent = Process("cri-resmgr-agent", [
            str(BIN / "cri-resmgr-agent"), "--kubeconfig", self.seed_api.kubeconfig,
            "--config-socket", self.config_socket, "--agent-socket", self.agent_socket, "--log-format", "text",
            *([f"--metrics-address=127.0.0.1:{self.metrics_port}", "--relay-metrics-socket", self.metrics_socket]
              if self.metrics_port else [])],
            self.dir, env={**os.environ, "NODE_NAME": self.name})
        self.agent.wait_until(lambda: unix_socket_answers(self.agent_socket), "agent socket", 90)

    def stop(self) -> None:
        for proc in (self.agent, self.resmgr):
            if proc is not None:
                proc.stop()
        try:
            self.core.delete_node(self.name)
        except ApiException:
            pass

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(60)}" for p in (self.resmgr, self.agent) if p)

    # observations -------------------------------------------------------------------------
    def active_config(self) -> tuple[dict[str, Any], str]:
        """The config the agent pushed and cri-resmgr applied, and its source, from cri-resmgr's cache
        (which records only runtime-applied configs: ({}, "") while the fallback file is in force)."""
        data = json.loads((self.relay_dir / "cache").read_text())
        return data.get("config") or {}, data.get("config_source", "")

    def reserved(self) -> str | None:
        config, _ = self.active_config()
        return config.get("policy", {}).get("ReservedResources", {}).get("cpu")

    def wait_reserved(self, cpus: str, timeout: float = 90.0) -> float:
        """Wait until cri-resmgr's active config reserves ``cpus``; returns the seconds it took."""
        start = time.monotonic()
        try:
            wait_for(lambda: self.reserved() == f"cpuset:{cpus}", f"reserved cpuset:{cpus} active", timeout, 0.01)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
        return time.monotonic() - start

    def annotations(self) -> dict[str, str]:
        return dict(self.core.read_node(self.name).metadata.annotations or {})

    def events(self) -> list[client.CoreV1Event]:
        items = self.core.list_namespaced_event("default",
                                                field_selector=f"involvedObject.name={self.name}").items
        return sorted(items, key=lambda e: (e.metadata.creation_timestamp, e.metadata.resource_version))

    def run_container(self, name: str, namespace: str = "default", pod: str | None = None, qos: str = "besteffort",
                      **resources: Any) -> str:
        """Run a pod with one container through the relay socket (as kubelet would); returns the container id."""
        pod = pod or name
        pod_cfg = write_json(self.dir / f"{pod}-pod.json", make_pod_config(pod, namespace=namespace, qos=qos))
        ctr_cfg = write_json(self.dir / f"{name}-ctr.json", make_container_config(name, **resources))
        ep = "unix://" + self.relay_socket
        try:
            pod_id = self.containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
            cid = self.containerd.crictl("create", pod_id, ctr_cfg, pod_cfg, endpoint=ep).stdout.strip()
            self.containerd.crictl("start", cid, endpoint=ep)
            self.pod_of[cid] = pod_id
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{self.logs()}") from None
        return cid

    def remove_pod_of(self, container_id: str) -> None:
        """Stop and remove a container's pod through the relay, as kubelet would."""
        ep = "unix://" + self.relay_socket
        pod_id = self.pod_of[container_id]
        self.containerd.crictl("stopp", pod_id, endpoint=ep)
        self.containerd.crictl("rmp", pod_id, endpoint=ep)

    def probe(self) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "cri-resmgr-agent-probe"), "-query", "config-status",
                               "-agent-socket", self.agent_socket], capture_output=True, text=True, timeout=60)


def put_config_map(core: client.CoreV1Api, name: str, data: dict[str, str]) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, namespace=NAMESPACE), data=data)
    try:
        core.replace_namespaced_config_map(name, NAMESPACE, body)
    except ApiException as exc:
        if exc.status != 404:
            raise
        core.create_namespaced_config_map(NAMESPACE, body)


def delete_config_map(core: client.CoreV1Api, name: str) -> None:
    try:
        core.delete_namespaced_config_map(name, NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _clean_kube_system(core: client.CoreV1Api, custom: client.CustomObjectsApi | None) -> None:
    for cm in core.list_namespaced_config_map(NAMESPACE).items:
        if cm.metadata.name.startswith("cri-resmgr-config.") or is_rollout_config_map(cm.metadata.name):
            delete_config_map(core, cm.metadata.name)
    if custom is not None:
        for adj in custom.list_namespaced_custom_object(*ADJ).get("items", []):
            custom.delete_namespaced_custom_object(*ADJ, adj["metadata"]["name"])


@pytest.fixture(scope="session")
def adjustment_crd(seed_api) -> None:
    seed_api.kubectl("apply", "--server-side", "-f", str(CRD))
    seed_api.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     "crd/adjustments.criresmgr.intel.com")


@pytest.fixture
def plane_node(seed_api, containerd, adjustment_crd) -> Iterator[Callable[..., PlaneNode]]:
    """Factory of started PlaneNodes; everything (processes, Node, ConfigMaps, Adjustments, pods) is cleaned up."""
    nodes: list[PlaneNode] = []
    api = seed_api.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    _clean_kube_system(core, custom)

    def make(fallback: str = TOPOLOGY_AWARE_RESERVED_0, labels: dict[str, str] | None = None,
             force: str | None = None, metrics: bool = False) -> PlaneNode:
        node = PlaneNode(seed_api, containerd, fallback, force, metrics)
        nodes.append(node)
        return node.start(labels)

    yield make
    for node in nodes:
        node.stop()
    _clean_kube_system(core, custom)
    containerd.remove_all()
    if not os.environ.get("KEEP_TEST_DIRS"):  # set it to keep the process logs for a post-mortem
        for node in nodes:
            shutil.rmtree(node.dir, ignore_errors=True)
