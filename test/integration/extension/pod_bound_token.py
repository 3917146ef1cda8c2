"""A pod-bound ServiceAccount token on one of two fresh Nodes, with the installation chart applied for real: how
the node-scoped admission policies (the agent's own Node, the installer's own record) are shown against the API."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar

from integration.extension.test_extension_charts import INSTALL_CHART, INSTALL_VALUES, helm

T = TypeVar("T")

# An upper bound for a failing test only: the wait ends at the first denial.
POLICY_LOAD_LIMIT_S = 120


def first_denial(attempt: Callable[[], T], denied: Callable[[T], bool], undo: Callable[[], None]) -> T:
    """Repeat ``attempt`` (each a fresh, uncached write) until the API server denies it, which is when it has
    loaded the chart's admission policy; ``undo`` removes what an allowed attempt wrote. Returns the denial, or
    the last allowed result after POLICY_LOAD_LIMIT_S."""
    deadline = time.monotonic() + POLICY_LOAD_LIMIT_S
    result = attempt()
    while not denied(result) and time.monotonic() < deadline:
        undo()
        time.sleep(0.5)
        result = attempt()
    return result


class Result(NamedTuple):
    returncode: int  # 0, or the HTTP status of the refusal
    stderr: str


def patch_node(api_url: str, token: str, node: str, body: dict[str, Any], *, status: bool = False) -> Result:
    """A merge patch of ``node`` (or its status) as our pods send it (no GET first), with ``token``."""
    req = urllib.request.Request(
        f"{api_url}/api/v1/nodes/{node}{'/status' if status else ''}", method="PATCH",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(req, context=ssl._create_unverified_context(), timeout=30):
            return Result(0, "")
    except urllib.error.HTTPError as err:
        return Result(err.code, err.read().decode(errors="replace"))


class BoundPod(NamedTuple):
    own: str  # the node the token's pod runs on
    other: str  # another node
    token: str
    suffix: str  # unique to this test run


@contextmanager
def pod_bound_token(tools, seed_api, *, policy: str, service_account: str, container: str) -> Iterator[BoundPod]:
    """Apply the chart (a shoot from 1.33, so ``policy`` is in it), make two Nodes and a pod of ``service_account``
    on the first, and yield a token bound to that pod; everything is deleted again afterwards."""
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                "--kube-version", "1.33.0", values=INSTALL_VALUES)
    assert f"name: {policy}" in text
    suffix = uuid.uuid4().hex[:6]
    own, other, pod = f"own-{suffix}", f"other-{suffix}", f"{container}-{suffix}"
    seed_api.kubectl("apply", "-f", "-", input=text)
    try:
        for name in (own, other):
            seed_api.kubectl("apply", "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        seed_api.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "kube-system"},
            "spec": {"nodeName": own, "serviceAccountName": service_account,
                     "containers": [{"name": container, "image": f"reg/{container}:v1"}]}}))
        token = seed_api.kubectl("create", "token", service_account, "-n", "kube-system",
                                 "--bound-object-kind", "Pod", "--bound-object-name", pod,
                                 "--duration", "10m").stdout.strip()
        yield BoundPod(own, other, token, suffix)
    finally:
        seed_api.kubectl("delete", "pod", pod, "-n", "kube-system", "--wait=false", check=False)
        seed_api.kubectl("delete", "node", own, other, check=False)
        seed_api.kubectl("delete", "validatingadmissionpolicybinding", policy, check=False)
        seed_api.kubectl("delete", "validatingadmissionpolicy", policy, check=False)
