"""Per-node proof that an install or uninstall has finished, read from the shoot.

ManagedResource conditions and pod readiness are not proof: a restarted kubelet reports the
installer pod Ready about 2 s before its first readiness probe ran. Each node's installer writes
the Lease kube-system/cri-resmgr-node-<node> (format: noderecord/) after "install complete"
or "uninstall complete"; this module reads those records against the shoot's node list:

* only the nodes the installation selects count (containerd nodes matching the nodeSelector and
  the workerPools, as the chart schedules the installer); a node that left the list no longer blocks;
* a record counts only with the expected state and the digest of the rollout the extension
  deployed (``rollout_digest``): a record of an earlier rollout never does;
* a node whose record says its uninstall failed is an error naming the node and the reason.

The shoot is read the standard Gardener way: the Secret ``shoot-access-extension-cri-resmgr``
(gardener-resource-manager's token-requestor fills in a token of the shoot ServiceAccount
kube-system/extension-cri-resmgr) combined with the generic token kubeconfig that gardenlet
writes into the shoot namespace and names in the Cluster's annotation. gardenlet writes that kubeconfig
for pods in the shoot namespace, with the server ``https://api.<shoot internal domain>`` (Istio TLS
termination, the default) or ``https://kube-apiserver``; this pod runs in ``extension-<name>``, where
neither is reachable, so it uses ``https://kube-apiserver.<shoot namespace>.svc`` (``in_cluster_server``).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import urllib3
import yaml
from kubernetes import client, config

import noderecord
from extension import constants as c
from extension.errors import RetryLater, WaitingError
from extension.gardener.kube import Apis, is_conflict, is_not_found

# Gardener's contract for shoot access (gardener pkg/utils/gardener AccessSecret, resources.gardener.cloud).
SHOOT_ACCESS_SERVICE_ACCOUNT = "extension-cri-resmgr"
SHOOT_ACCESS_SECRET = "shoot-access-" + SHOOT_ACCESS_SERVICE_ACCOUNT
PURPOSE_LABEL = "resources.gardener.cloud/purpose"
PURPOSE_TOKEN_REQUESTOR = "token-requestor"
CLASS_LABEL = "resources.gardener.cloud/class"
CLASS_SHOOT = "shoot"
SA_NAME_ANNOTATION = "serviceaccount.resources.gardener.cloud/name"
SA_NAMESPACE_ANNOTATION = "serviceaccount.resources.gardener.cloud/namespace"
GENERIC_KUBECONFIG_ANNOTATION = "generic-token-kubeconfig.secret.gardener.cloud/name"
GENERIC_KUBECONFIG_DEFAULT = "generic-token-kubeconfig"
# The shoot's kube-apiserver Service in its control plane namespace (gardener v1.149.3
# pkg/component/kubernetes/apiserverexposure/service.go: name v1beta1constants.DeploymentNameKubeAPIServer,
# port kubeapiserverconstants.Port = 443).
KUBE_APISERVER_SERVICE = "kube-apiserver"
# A self-hosted shoot that runs its own control plane reaches its API server as kubernetes.default.svc
# (pkg/gardenlet/operation/shoot/shoot.go ComputeInClusterAPIServerAddress, RunsControlPlane).
SELF_HOSTED_SERVER = "kubernetes.default.svc"
# The chart's baseNodeSelector: the installer runs only where containerd runs.
BASE_NODE_SELECTOR = {"worker.gardener.cloud/cri-name": "containerd"}
# Annotations on the ManagedResource: what the records must say for the health check.
EXPECTED_STATE_ANNOTATION = "cri-resmgr.extensions.gardener.cloud/node-record-state"
EXPECTED_DIGEST_ANNOTATION = "cri-resmgr.extensions.gardener.cloud/node-record-digest"
EXPECTED_SELECTION_ANNOTATION = "cri-resmgr.extensions.gardener.cloud/node-selection"
MAX_NAMED = 5  # nodes named in one message; the rest are counted


class NodesNotDone(WaitingError):
    """Some selected nodes have no record of the expected rollout yet."""


class NodesFailed(RetryLater):
    """Some selected nodes report that the step failed; retried, and reported as an error."""


class ShootUnreachable(WaitingError):
    """The shoot's API server cannot be reached (name resolution, connection, TLS): no record can be read."""


# What a failed connection raises through the kubernetes client: urllib3's errors (MaxRetryError wrapping
# NameResolutionError/NewConnectionError, ProtocolError, timeouts, SSLError) and socket errors.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)


def rollout_digest(inputs: dict[str, Any], *extra: str) -> str:
    """The digest of a rollout: what the installer applies (and, for an uninstall, the deletion it answers)."""
    doc = json.dumps({"values": inputs, "extra": list(extra)}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Selection:
    node_selector: dict[str, str] = field(default_factory=dict)
    worker_pools: tuple[str, ...] = ()

    def selects(self, labels: dict[str, str]) -> bool:
        wanted = {**BASE_NODE_SELECTOR, **self.node_selector}
        if any(labels.get(k) != v for k, v in wanted.items()):
            return False
        return not self.worker_pools or labels.get(c.WORKER_POOL_LABEL) in self.worker_pools

    def to_annotation(self) -> str:
        return json.dumps({"nodeSelector": self.node_selector, "workerPools": list(self.worker_pools)},
                          sort_keys=True)

    @classmethod
    def from_annotation(cls, text: str) -> Selection:
        doc = json.loads(text or "{}")
        return cls(dict(doc.get("nodeSelector") or {}), tuple(doc.get("workerPools") or ()))


@dataclass(frozen=True)
class Proof:
    nodes: int  # selected nodes
    pending: list[str]  # "node: why"
    failed: list[str]  # "node: reason"
    # Mode nri on a node whose containerd has NRI off: "node: how to turn it on" (an error, never a fallback).
    nri_off: list[str] = field(default_factory=list)
    # Nodes that are done but where mode auto chose the relay because NRI is off: "node: why".
    auto_relay: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return not self.pending and not self.failed and not self.nri_off


def assess(nodes: list[dict[str, Any]], leases: list[dict[str, Any]], state: str, digest: str,
           selection: Selection) -> Proof:
    """Judge the installers' records against the node list: which selected nodes are done, pending or failed."""
    records = {r.node: r for r in (noderecord.from_lease(lease) for lease in leases) if r is not None}
    failed_state = noderecord.UNINSTALL_FAILED if state == noderecord.UNINSTALLED else noderecord.INSTALL_FAILED
    return judge(nodes, records, digest, lambda node: selection.selects(node["metadata"].get("labels") or {}),
                 done=(state,), failed=(failed_state,),
                 unavailable=(noderecord.NRI_UNAVAILABLE,) if state == noderecord.INSTALLED else ())


def judge(nodes: list[dict[str, Any]], records: Mapping[str, noderecord.NodeRecord], digest: str,
          counts: Callable[[dict[str, Any]], bool], *, done: Collection[str], failed: Collection[str],
          unavailable: Collection[str] = ()) -> Proof:
    """Which of the nodes that count have a record of this rollout (``digest``) in a ``done`` state, which failed,
    which are pending, and which cannot run it (``unavailable``: mode nri on a node with NRI off). One judge for
    the installers' records (``assess``) and the agents' reports on a staged config rollout
    (extension/config_rollout.py)."""
    pending, failures, nri_off, auto_relay, selected = [], [], [], [], 0
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        if not counts(node):
            continue
        selected += 1
        rec = records.get(name)
        if rec is None:
            pending.append(f"{name}: no record yet")
        elif rec.digest != digest:
            pending.append(f"{name}: record is of another rollout ({rec.state})")
        elif rec.state in done:
            if rec.reason.startswith(noderecord.AUTO_RELAY_PREFIX):
                auto_relay.append(f"{name}: {rec.reason.removeprefix(noderecord.AUTO_RELAY_PREFIX)}")
            continue
        elif rec.state in unavailable:
            nri_off.append(f"{name}: {rec.reason or rec.state}")
        elif rec.state in failed:
            failures.append(f"{name}: {rec.reason or rec.state}")
        else:
            pending.append(f"{name}: {rec.state}" + (f" ({rec.reason})" if rec.reason else ""))
    return Proof(selected, pending, failures, nri_off, auto_relay)


def describe(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_NAMED])
    return shown + (f"; and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


# -- shoot access --------------------------------------------------------------------------------


def access_secret_body(namespace: str) -> client.V1Secret:
    """The shoot-access Secret as Gardener's AccessSecret writes it (purpose, class, ServiceAccount)."""
    return client.V1Secret(type="Opaque", metadata=client.V1ObjectMeta(
        name=SHOOT_ACCESS_SECRET, namespace=namespace,
        labels={PURPOSE_LABEL: PURPOSE_TOKEN_REQUESTOR, CLASS_LABEL: CLASS_SHOOT, c.ORIGIN_LABEL: c.ORIGIN_VALUE},
        annotations={SA_NAME_ANNOTATION: SHOOT_ACCESS_SERVICE_ACCOUNT,
                     SA_NAMESPACE_ANNOTATION: c.SHOOT_SYSTEM_NAMESPACE}))


def ensure_shoot_access(apis: Apis, namespace: str) -> None:
    """Create the shoot-access Secret for gardener-resource-manager's token-requestor (once)."""
    try:
        apis.core.create_namespaced_secret(namespace, access_secret_body(namespace))
    except Exception as err:
        if not is_conflict(err):
            raise


def delete_shoot_access(apis: Apis, namespace: str) -> None:
    try:
        apis.core.delete_namespaced_secret(SHOOT_ACCESS_SECRET, namespace)
    except Exception as err:
        if not is_not_found(err):
            raise


def _secret_data(apis: Apis, namespace: str, name: str) -> dict[str, bytes] | None:
    # A list by name, not a get: the seed RBAC grants the extension no reading of secrets by name.
    items = apis.core.list_namespaced_secret(namespace, field_selector=f"metadata.name={name}").items
    if not items:
        return None
    return {k: base64.b64decode(v) for k, v in (items[0].data or {}).items()}


def in_cluster_server(server: str, namespace: str) -> str:
    """The shoot API server's address as seen from this pod (outside the shoot namespace, without Istio).

    gardenlet v1.149.3 writes the generic token kubeconfig's server for pods in the shoot namespace
    (pkg/gardenlet/operation/botanist/secrets.go generateGenericTokenKubeconfig, through
    pkg/utils/gardener/tokenrequest/secrets.go GenerateGenericTokenKubeconfig and
    pkg/utils/kubernetes/kubernetes.go NewKubeconfig, which prepends ``https://``):

    * ``api.<shoot internal domain>`` (pkg/gardenlet/operation/shoot/shoot.go
      ComputeOutOfClusterAPIServerAddress(true)) when the shoot uses Istio TLS termination: the
      feature gate IstioTLSTermination (Beta, on by default, pkg/features/features.go) and no
      annotation ``shoot.gardener.cloud/disable-istio-tls-termination: "true"``
      (pkg/api/core/v1beta1/helper/shoot.go IsShootIstioTLSTerminationEnabled). That name reaches
      the API server through the Istio ingress gateway; shoot-namespace pods get a hostAlias for it,
      ``extension-*`` pods do not;
    * ``kube-apiserver`` (ComputeInClusterAPIServerAddress(true)) otherwise: it resolves only in
      the shoot namespace;
    * ``kubernetes.default.svc`` for a self-hosted shoot that runs its own control plane
      (RunsControlPlane).

    Gardener's extensions library reaches the shoot through the ``gardener-internal`` kubeconfig
    instead (extensions/pkg/util/shoot_clients.go NewClientForShoot), whose server is
    ComputeInClusterAPIServerAddress(false) = ``kube-apiserver.<namespace>.svc``
    (pkg/gardenlet/operation/botanist/gardeneraccess.go, pkg/component/gardener/access/access.go):
    the shoot namespace's ``kube-apiserver`` Service on port 443
    (pkg/component/kubernetes/apiserverexposure/service.go), a name in the API server's certificate
    (pkg/component/kubernetes/apiserver/secrets.go, pkg/utils/kubernetes/service.go
    DNSNamesForService). So every DNS name becomes that Service. Kept as written:
    ``kubernetes.default.svc`` and its longer forms, and an IP literal (a test or development API
    server; gardenlet never writes one).
    """
    parts = urlsplit(server if "://" in server else "https://" + server)
    host = parts.hostname or ""
    if _is_ip_literal(host) or host == SELF_HOSTED_SERVER or host.startswith(SELF_HOSTED_SERVER + "."):
        return server
    return f"https://{KUBE_APISERVER_SERVICE}.{namespace}.svc"


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def shoot_kubeconfig(generic_kubeconfig: bytes, token: str, namespace: str) -> dict[str, Any]:
    """The generic kubeconfig for this pod: the token itself instead of the token file (in-process use),
    and the server as reachable from this namespace (``in_cluster_server``)."""
    doc = yaml.safe_load(generic_kubeconfig)
    if not isinstance(doc, dict) or not doc.get("users"):
        raise ValueError("the generic token kubeconfig has no users")
    for user in doc["users"]:
        user["user"] = {"token": token}
    for cluster in doc.get("clusters") or []:
        spec = cluster.get("cluster") or {}
        if spec.get("server"):
            spec["server"] = in_cluster_server(spec["server"], namespace)
    return doc


class ShootReader:
    """Reads nodes and node records of one shoot through the shoot-access token; clients are cached per token."""

    def __init__(self, apis: Apis) -> None:
        self.apis = apis
        self._clients: dict[str, tuple[str, client.ApiClient]] = {}

    def api_client(self, namespace: str) -> client.ApiClient:
        kubeconfig_name = self._generic_kubeconfig_name(namespace)
        generic = _secret_data(self.apis, namespace, kubeconfig_name)
        if generic is None or "kubeconfig" not in generic:
            raise WaitingError(f"waiting for the generic token kubeconfig secret {namespace}/{kubeconfig_name} "
                               "(written by gardenlet) to read the shoot's nodes", 5.0)
        access = _secret_data(self.apis, namespace, SHOOT_ACCESS_SECRET)
        if access is None:  # deleted behind our back, or deployed by an older version: ask for it again
            ensure_shoot_access(self.apis, namespace)
            access = {}
        token = access.get("token", b"").decode()
        if not token:
            raise WaitingError(f"waiting for gardener-resource-manager's token-requestor to fill in "
                               f"secret {namespace}/{SHOOT_ACCESS_SECRET}", 5.0)
        key = hashlib.sha256(generic["kubeconfig"] + token.encode()).hexdigest()
        cached = self._clients.get(namespace)
        if cached is not None and cached[0] == key:
            return cached[1]
        cfg = client.Configuration()
        config.load_kube_config_from_dict(shoot_kubeconfig(generic["kubeconfig"], token, namespace),
                                          client_configuration=cfg)
        api = client.ApiClient(cfg)
        self._clients[namespace] = (key, api)
        return api

    def _generic_kubeconfig_name(self, namespace: str) -> str:
        try:
            cluster = self.apis.custom.get_cluster_custom_object(
                c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLUSTERS_PLURAL, namespace)
        except Exception as err:
            if is_not_found(err):
                return GENERIC_KUBECONFIG_DEFAULT
            raise
        ann = (cluster.get("metadata") or {}).get("annotations") or {}
        return ann.get(GENERIC_KUBECONFIG_ANNOTATION) or GENERIC_KUBECONFIG_DEFAULT

    def nodes_and_records(self, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The shoot's nodes and node records; ShootUnreachable when its API server cannot be reached."""
        api = self.api_client(namespace)
        try:
            nodes = _list(client.CoreV1Api(api).list_node)
            leases = _list(client.CoordinationV1Api(api).list_namespaced_lease, namespace=c.SHOOT_SYSTEM_NAMESPACE,
                           label_selector=f"{noderecord.LABEL}={noderecord.LABEL_VALUE}")
        except CONNECTION_ERRORS as err:
            raise ShootUnreachable(f"cannot reach the shoot's API server {api.configuration.host}: {err}",
                                   5.0) from err
        return nodes, leases

    def check(self, namespace: str, state: str, digest: str, selection: Selection, delay: float) -> Proof:
        """Raise NodesFailed or NodesNotDone unless every selected node's record says ``state`` for ``digest``;
        ShootUnreachable when the shoot's API server cannot be reached."""
        try:
            nodes, leases = self.nodes_and_records(namespace)
        except ShootUnreachable as err:  # retried at the caller's pace
            raise ShootUnreachable(str(err), delay) from err
        proof = assess(nodes, leases, state, digest, selection)
        verb = "uninstall" if state == noderecord.UNINSTALLED else "install"
        problems = []
        if proof.failed:
            problems.append(f"{verb} failed on {len(proof.failed)} of {proof.nodes} node(s): {describe(proof.failed)}")
        if proof.nri_off:
            # Said as it is: mode nri does not fall back to the relay.
            problems.append(f"mode nri, but containerd's NRI is off on {len(proof.nri_off)} of {proof.nodes} "
                            f"node(s), which run without cri-resmgr: {describe(proof.nri_off)}")
        if problems:
            raise NodesFailed("; ".join(problems) + "; retrying", delay)
        if proof.pending:
            raise NodesNotDone(f"waiting for the {verb} on {len(proof.pending)} of {proof.nodes} node(s): "
                               f"{describe(proof.pending)}", delay)
        return proof


def health(reader: ShootReader, namespace: str, mr: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """SystemComponentsHealthy from the nodes' records, for a ManagedResource that says what to expect.

    None when the ManagedResource expects no records (deployed before node records existed).
    """
    ann = ((mr or {}).get("metadata") or {}).get("annotations") or {}
    state, digest = ann.get(EXPECTED_STATE_ANNOTATION), ann.get(EXPECTED_DIGEST_ANNOTATION)
    if not state or not digest:
        return None
    try:
        proof = reader.check(namespace, state, digest, Selection.from_annotation(ann.get(EXPECTED_SELECTION_ANNOTATION,
                                                                                            "")), 0)
    except NodesFailed as err:
        return "False", c.REASON_UNSUCCESSFUL, str(err)
    except Exception as err:
        if isinstance(err, WaitingError) and not isinstance(err, ShootUnreachable):  # not done, or no access yet
            return "Progressing", c.REASON_PROGRESSING, str(err)
        # The shoot cannot be read: the check itself failed.
        return "Unknown", c.REASON_CONDITION_CHECK_ERROR, f"cannot read the nodes' records from the shoot: {err}"
    message = f"All health checks successful; {proof.nodes} node(s) report {state}"
    if proof.auto_relay:
        message += (f"; mode auto runs the relay on {len(proof.auto_relay)} node(s) because containerd's NRI is off "
                    f"there: {describe(proof.auto_relay)}")
    return "True", c.REASON_SUCCESSFUL, message


def _list(fn: Any, **kwargs: Any) -> list[dict[str, Any]]:
    resp = fn(_preload_content=False, **kwargs)
    return list(json.loads(resp.data).get("items") or [])
