"""Install and uninstall end only on every node's own record (issue 16 item 9), on the local landscape
with the real gardener-resource-manager (its token-requestor gives the extension its shoot token).

* Install: whenever SystemComponentsHealthy is True, every node's record says "installed" for the
  rollout the extension deployed.
* The extension reads them as on a real seed: through the generic token kubeconfig exactly as gardenlet
  writes it (server ``https://api.<internal domain>``, which nothing here resolves), past the seed's
  NetworkPolicies, which kube-router enforces. Without the pod label that gardener-resource-manager's
  NetworkPolicy controller admits to the shoot's kube-apiserver, health goes Unknown; back with it, True.
* Uninstall, one node slow and one failing (node-file failpoints, installer/failpoints.py): the
  Extension reports an error naming the failing node and keeps the ManagedResource; once that node
  is fixed it finishes, and the ManagedResource is never gone before every node recorded its uninstall.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from e2e import scenarios
from e2e.targets import LandscapeTarget

import noderecord
from devland import seed_extension, shoot_ops
from devland.control_plane import iptables_save
from devland.landscape import SHOOT_INTERNAL_DOMAIN
from extension import node_proof
from installer import failpoints

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

FAILPOINT = f"{failpoints.NODE_FAILPOINT_DIR}/uninstall-start"
MR = "extension-runtime-cri-resmgr"
TO_SHOOT_APISERVERS = "networking.resources.gardener.cloud/to-all-shoots-kube-apiserver-tcp-443"


def records(shoot) -> dict[str, noderecord.NodeRecord]:
    items = shoot.get_json("leases", "-n", "kube-system", "-l",
                           f"{noderecord.LABEL}={noderecord.LABEL_VALUE}")["items"]
    return {r.node: r for r in map(noderecord.from_lease, items) if r is not None}


def managed_resource(land) -> dict | None:
    r = land.seed.run("-n", land.namespace, "get", "managedresource", MR, "-o", "json", check=False)
    if r.returncode != 0:
        assert "NotFound" in r.stderr, r.stderr
        return None
    return json.loads(r.stdout)


def condition(ext: dict | None) -> dict:
    conds = ((ext or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "SystemComponentsHealthy"), {})


def all_recorded(recs: dict, nodes: list[str], state: str, digest: str) -> bool:
    return all(n in recs and (recs[n].state, recs[n].digest) == (state, digest) for n in nodes)


def generic_kubeconfig_server(land) -> str:
    """The server of the generic token kubeconfig the Cluster names, as the extension reads it."""
    cluster = land.seed.get_json("cluster", land.namespace)
    name = cluster["metadata"]["annotations"][node_proof.GENERIC_KUBECONFIG_ANNOTATION]
    secret = land.seed.get_json("secret", name, "-n", land.namespace)
    return yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))["clusters"][0]["cluster"]["server"]


def set_shoot_apiserver_label(land, present: bool) -> None:
    """Add or remove the extension pod's label for egress to every shoot's kube-apiserver (a new rollout)."""
    path = "/spec/template/metadata/labels/" + TO_SHOOT_APISERVERS.replace("/", "~1")
    op = {"op": "add", "path": path, "value": "allowed"} if present else {"op": "remove", "path": path}
    land.seed.run("-n", seed_extension.NAMESPACE, "patch", "deployment", seed_extension.NAME, "--type", "json",
                  "-p", json.dumps([op]))
    land.seed.run("-n", seed_extension.NAMESPACE, "rollout", "status", f"deployment/{seed_extension.NAME}",
                  "--timeout=180s", timeout=210)


def test_install_and_uninstall_end_only_on_every_nodes_record(inside):
    t = LandscapeTarget(inside)
    t.create()
    g, shoot = t.gardenlet, t.shoot()
    nodes = sorted(shoot_ops.shoot_nodes(shoot))
    assert len(nodes) >= 2, nodes
    t.enable(scenarios.provider_config(), wait=False)

    def healthy_only_with_records() -> tuple[bool, str]:
        cond = condition(g.extension())
        if cond.get("status") != "True":
            return False, f"SystemComponentsHealthy {cond.get('status')}: {cond.get('message')}"
        digest = managed_resource(inside)["metadata"]["annotations"][node_proof.EXPECTED_DIGEST_ANNOTATION]
        recs = records(shoot)
        assert all_recorded(recs, nodes, noderecord.INSTALLED, digest), (cond, digest, recs)
        return True, ""
    # The seed as a real one: gardenlet's kubeconfig names the internal domain; NetworkPolicies are enforced.
    assert generic_kubeconfig_server(inside) == f"https://api.{SHOOT_INTERNAL_DOMAIN}"
    assert inside.seed.get_json("networkpolicy", "deny-all", "-n", seed_extension.NAMESPACE)
    assert "KUBE-ROUTER-FORWARD" in iptables_save("filter"), "kube-router enforces no NetworkPolicy"
    shoot_ops.wait_until("SystemComponentsHealthy True", healthy_only_with_records, 600, 1)
    t.wait_reconciled()

    def unreachable() -> tuple[bool, str]:
        cond = condition(g.extension())
        done = cond.get("status") == "Unknown" and "cannot reach the shoot's API server" in cond.get("message", "")
        return done, f"SystemComponentsHealthy {cond.get('status')}: {cond.get('message')}"
    set_shoot_apiserver_label(inside, present=False)
    try:
        shoot_ops.wait_until("SystemComponentsHealthy Unknown without the label", unreachable, 300, 1)
    finally:
        set_shoot_apiserver_label(inside, present=True)
    shoot_ops.wait_until("SystemComponentsHealthy True with the label back", healthy_only_with_records, 300, 1)

    slow, failing = nodes[0], nodes[1]
    runners = {r.node: r for r in t.runners([slow, failing])}
    try:
        for node, action in ((slow, "sleep 20"), (failing, "fail injected by the e2e test")):
            runners[node].run(f"mkdir -p {failpoints.NODE_FAILPOINT_DIR} && echo '{action}' > {FAILPOINT}",
                              check=True)
        t.disable(wait=False)
        seen: dict[str, str] = {}

        def mr_stays_until_every_record() -> tuple[bool, str]:
            """The invariant, sampled: no ManagedResource deletion before every node recorded its uninstall."""
            mr = managed_resource(inside)
            if mr is not None:
                ann = mr["metadata"].get("annotations") or {}
                if ann.get(node_proof.EXPECTED_STATE_ANNOTATION) == noderecord.UNINSTALLED:
                    seen["digest"] = ann[node_proof.EXPECTED_DIGEST_ANNOTATION]
                return False, "managed resource still there"
            assert "digest" in seen, "the uninstall ManagedResource was never seen"
            recs = records(shoot)
            assert all_recorded(recs, nodes, noderecord.UNINSTALLED, seen["digest"]), (seen, recs)
            return True, ""

        def error_names_the_failing_node() -> tuple[bool, str]:
            mr_stays_until_every_record()
            ext = g.extension()
            err = (((ext or {}).get("status") or {}).get("lastError") or {}).get("description", "")
            return failing in err and "injected by the e2e test" in err, err or "no lastError yet"
        shoot_ops.wait_until("an error naming the failing node", error_names_the_failing_node, 600, 1)
        assert g.extension() is not None and managed_resource(inside) is not None
        runners[failing].run(f"rm -f {FAILPOINT}", check=True)
        shoot_ops.wait_until("the ManagedResource deleted after every node's record", mr_stays_until_every_record,
                             600, 0.5)
        t.wait_gone()
    finally:
        for r in runners.values():
            r.run(f"rm -rf {failpoints.NODE_FAILPOINT_DIR}")
    scenarios.assert_nodes(t, installed=False)
    t.delete()
