"""The shoot API as this pod reaches it: gardenlet's generic token kubeconfig, read from ``extension-<name>``.

gardenlet v1.149.3 writes the server ``https://api.<shoot internal domain>`` (Istio TLS termination, the
default) or ``https://kube-apiserver`` (the shoot opts out); neither is reachable from an ``extension-*`` pod
without Istio. The extension uses ``kube-apiserver.<shoot namespace>.svc`` on port 443 as Gardener's
extensions library does, and its seed pod needs the label that lets NetworkPolicies admit its egress to
every shoot's API server.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from extension import chart_render, node_proof

REPO = Path(__file__).resolve().parents[3]
NS = "shoot--p--s"
TO_SHOOT_APISERVERS = "networking.resources.gardener.cloud/to-all-shoots-kube-apiserver-tcp-443"


def generic_kubeconfig(server: str) -> bytes:
    """The generic token kubeconfig as gardenlet writes it (a token file, the server as given)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": NS,
        "clusters": [{"name": NS, "cluster": {"server": server, "certificate-authority-data": "Q0E="}}],
        "contexts": [{"name": NS, "context": {"cluster": NS, "user": NS}}],
        "users": [{"name": NS, "user": {"tokenFile": "/var/run/secrets/gardener.cloud/shoot/token/token"}}],
    }).encode()


SVC = f"https://kube-apiserver.{NS}.svc"


@pytest.mark.parametrize("server,expected", [
    # Istio TLS termination (IstioTLSTermination, Beta, on by default): ComputeOutOfClusterAPIServerAddress(true).
    ("https://api.s.p.internal.example.com", SVC),
    ("https://api.s.p.internal.example.com:443", SVC),
    # Annotated shoot.gardener.cloud/disable-istio-tls-termination=true: ComputeInClusterAPIServerAddress(true).
    ("https://kube-apiserver", SVC),
    ("https://kube-apiserver:6443", SVC),  # the Service listens on 443 whatever the port says
    (SVC, SVC),
    ("https://kube-apiserver.shoot--other--x.svc", SVC),  # always this Cluster's namespace
    ("https://kube-apiserver-x", SVC),
    ("kube-apiserver", SVC),  # NewKubeconfig prepends https://; a bare name is read the same way
    # A self-hosted shoot that runs its own control plane: ComputeInClusterAPIServerAddress -> kubernetes.default.svc.
    ("https://kubernetes.default.svc", "https://kubernetes.default.svc"),
    ("https://kubernetes.default.svc.cluster.local", "https://kubernetes.default.svc.cluster.local"),
    # IP literals: a test or development API server, never written by gardenlet.
    ("https://127.0.0.1:6443", "https://127.0.0.1:6443"),
    ("https://10.250.0.2:6443", "https://10.250.0.2:6443"),
    ("https://[fd00::1]:6443", "https://[fd00::1]:6443"),
])
def test_every_dns_name_becomes_the_kube_apiserver_service(server: str, expected: str) -> None:
    assert node_proof.in_cluster_server(server, NS) == expected


class _Secrets:
    """The two Secrets the reader lists by name, and no Cluster (the default kubeconfig name)."""

    def __init__(self, secrets: dict[str, dict[str, bytes]]) -> None:
        self.secrets = secrets

    def list_namespaced_secret(self, namespace: str, field_selector: str) -> Any:
        name = field_selector.removeprefix("metadata.name=")
        data = self.secrets.get(name)
        if namespace != NS or data is None:
            return SimpleNamespace(items=[])
        return SimpleNamespace(items=[SimpleNamespace(data={k: base64.b64encode(v).decode() for k, v in data.items()})])

    def get_cluster_custom_object(self, *_: Any) -> Any:
        raise ApiException(status=404, reason="NotFound")


@pytest.mark.parametrize("server", ["https://kube-apiserver", "https://api.s.p.internal.example.com"])
def test_the_reader_connects_to_the_address_reachable_from_our_namespace(server: str) -> None:
    fake = _Secrets({node_proof.GENERIC_KUBECONFIG_DEFAULT: {"kubeconfig": generic_kubeconfig(server)},
                     node_proof.SHOOT_ACCESS_SECRET: {"token": b"tok"}})
    api = node_proof.ShootReader(SimpleNamespace(core=fake, custom=fake)).api_client(NS)
    assert api.configuration.host == SVC
    assert api.configuration.api_key["BearerToken"] == "Bearer tok"


def render_seed_chart() -> list[dict[str, Any]]:
    chart = REPO / "charts/gardener-extension-cri-resmgr"
    r = subprocess.run([chart_render.find_helm(), "template", "cri-resmgr-extension", str(chart),
                        "--namespace", "extension-cri-resmgr-x"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def test_the_seed_pod_may_reach_every_shoots_api_server() -> None:
    # extension-* namespaces are deny-all; gardener-resource-manager's NetworkPolicy controller admits egress
    # to the shoots' kube-apiservers for pods with this label (gardener docs/operations/network_policies.md).
    deployments = [d for d in render_seed_chart() if d["kind"] == "Deployment"]
    assert len(deployments) == 1
    labels = deployments[0]["spec"]["template"]["metadata"]["labels"]
    assert labels.get(TO_SHOOT_APISERVERS) == "allowed"
