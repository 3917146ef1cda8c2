"""The seed Prometheus's path to cri-resmgr's /metrics on the local landscape: the shoot kube-apiserver's
pod proxy to each cri-resmgr-agent pod (endpoints of the Service cri-resmgr-metrics, as the ScrapeConfig
of extension/monitoring.py finds them), which answers with its node's relay exposition read from the
relay's unix socket. The landscape's CNI (bridge) does not enforce NetworkPolicies, so this proves the
path, not the vpn-shoot-only policy (that is checked on the rendered chart)."""

from __future__ import annotations

import pytest
from e2e import scenarios
from e2e.targets import LandscapeTarget

from devland import shoot_ops

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def test_every_nodes_relay_metrics_through_the_api_server_pod_proxy(inside):
    t = LandscapeTarget(inside)
    t.create()
    t.enable(scenarios.provider_config())
    scenarios.assert_nodes(t, installed=True)
    shoot = t.shoot()
    nodes = sorted(shoot_ops.shoot_nodes(shoot))
    targets: dict[str, str] = {}

    def every_node_listed() -> tuple[bool, str]:
        # The endpoints controller lists an agent pod a moment after the pod exists: CI once read the
        # Service's endpoints with one of two agents missing, right after every node recorded "installed".
        endpoints = shoot.get_json("endpoints", "-n", "kube-system", "cri-resmgr-metrics")
        targets.clear()
        targets.update({a["targetRef"]["name"]: a["nodeName"] for s in endpoints.get("subsets", [])
                        for a in s.get("addresses", []) + s.get("notReadyAddresses", [])})
        return sorted(targets.values()) == nodes, f"endpoints on {sorted(targets.values())}, nodes {nodes}"

    shoot_ops.wait_until("an agent endpoint on every node", every_node_listed, 60, 2)

    for pod, node in targets.items():
        def relay_series(pod: str = pod) -> tuple[bool, str]:
            r = shoot.run("get", "--raw", f"/api/v1/namespaces/kube-system/pods/{pod}:8891/proxy/metrics",
                          check=False)
            ok = r.returncode == 0 and 'cri_resmgr_requests_total{code="OK",method="Version"}' in r.stdout
            return ok, r.stderr.strip() or r.stdout[:200]
        shoot_ops.wait_until(f"{node}'s relay metrics through {pod}", relay_series, 120, 2)

    # The agents that just forwarded those metrics run as uid 65532: they made their API sockets in the
    # setgid directory they mount, whose group is theirs; the CRI socket is root's and outside it.
    runners = t.runners(sorted(targets.values()))
    try:
        for node in runners:
            owners = node.run("stat -c '%n %a %u %g' /var/run/cri-resmgr/agent "
                              "/var/run/cri-resmgr/agent/cri-resmgr-agent.sock /var/run/cri-resmgr/cri-resmgr.sock")
            assert owners.stdout.split("\n")[:3] == [
                "/var/run/cri-resmgr/agent 2770 0 65532",
                "/var/run/cri-resmgr/agent/cri-resmgr-agent.sock 660 65532 65532",
                "/var/run/cri-resmgr/cri-resmgr.sock 660 0 0"], (node.node, owners.stdout, owners.stderr)
    finally:
        t.close_runners(runners)
    t.delete()
