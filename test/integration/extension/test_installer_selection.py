"""Nodes outside the selection run the installer in uninstall mode; the two DaemonSets never overlap.

A node that leaves the selection (narrowed workerPools or nodeSelector, or relabelled) loses its
install pod to the DaemonSet controller (SIGTERM never uninstalls) and gets a cleanup pod, which
uninstalls as on disable. Checked on the rendered chart (accepted by a real API server) against
node label sets, with Kubernetes' documented In/NotIn semantics (an absent label is NotIn).
"""

from __future__ import annotations

import itertools
import re

import yaml
from integration.extension.test_extension_charts import INSTALL_CHART, INSTALL_VALUES, helm

BASE = {"worker.gardener.cloud/cri-name": "containerd"}


def matches(pod_spec: dict, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    terms = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    if not terms:
        return True

    def holds(e: dict) -> bool:
        value = labels.get(e["key"])
        return value in e["values"] if e["operator"] == "In" else value not in e["values"]

    return any(all(holds(e) for e in term["matchExpressions"]) for term in terms)


def daemonsets(tools, values: dict) -> dict[str, dict]:
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                values=values)
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text)
            if d and d["kind"] == "DaemonSet" and d["metadata"]["name"].startswith("cri-resmgr-installer")}


def test_every_containerd_node_gets_exactly_one_installer(tools, seed_api):
    values = {**INSTALL_VALUES, "workerPools": ["a", "b"], "nodeSelector": {"example.com/x": "y"}}
    ds = daemonsets(tools, values)
    install, cleanup = ds["cri-resmgr-installer"], ds["cri-resmgr-installer-cleanup"]
    assert install["spec"]["selector"] != cleanup["spec"]["selector"]
    env = {e["name"]: e.get("value") for e in cleanup["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CRI_RESMGR_INSTALLER_MODE"] == "uninstall"
    pools, xs = ["a", "b", "c", None], ["y", "z", None]
    for pool, x in itertools.product(pools, xs):
        labels = dict(BASE)
        if pool:
            labels["worker.gardener.cloud/pool"] = pool
        if x:
            labels["example.com/x"] = x
        selected = pool in ("a", "b") and x == "y"
        on = [name for name, d in ds.items() if matches(d["spec"]["template"]["spec"], labels)]
        assert on == (["cri-resmgr-installer"] if selected else ["cri-resmgr-installer-cleanup"]), labels
    # Nodes without containerd get neither.
    assert not any(matches(d["spec"]["template"]["spec"], {"worker.gardener.cloud/pool": "a"}) for d in ds.values())
    # The API server takes both.
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                values=values)
    r = seed_api.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
    assert re.search(r"daemonset.apps/cri-resmgr-installer-cleanup (created|configured|unchanged) \(server dry run\)",
                     r.stdout), r.stdout


def test_no_cleanup_daemonset_without_a_selection(tools):
    ds = daemonsets(tools, {**INSTALL_VALUES, "workerPools": [], "nodeSelector": {}})
    assert list(ds) == ["cri-resmgr-installer"]
