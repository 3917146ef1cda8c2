"""providerConfig.webhook.enabled on the local landscape: the extension deploys cri-resmgr-webhook into the shoot,
the shoot kube-apiserver reaches it through its Service (kube-proxy in the landscape's namespace) and a pod
admitted there carries intel.com/resources; on disable the webhook's objects leave the shoot. A server-side dry
run goes through the same admission chain without running a pod (lean); what cri-resmgr makes of the
annotation is tested against the real API server in test/integration/webhook/."""

from __future__ import annotations

import json

import pytest
from e2e import scenarios
from e2e.targets import LandscapeTarget

from devland import shoot_ops

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "webhook-probe", "namespace": "default"},
       "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
           "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}}]}}


def test_webhook_annotates_pods_in_the_shoot_and_goes_on_disable(inside):
    t = LandscapeTarget(inside)
    t.create()
    t.enable({**scenarios.provider_config(), "webhook": {"enabled": True}})
    shoot = t.shoot()
    seen: dict[str, str] = {}

    def annotated() -> tuple[bool, str]:
        r = shoot.run("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(POD), check=False)
        if r.returncode != 0:
            return False, r.stderr.strip()
        value = (json.loads(r.stdout)["metadata"].get("annotations") or {}).get("intel.com/resources")
        if value is not None:
            seen["value"] = value
        return value is not None, f"no annotation yet (webhook pods: {webhook_pods(shoot)})"
    # failurePolicy Ignore: until the webhook pods serve, pods are admitted without the annotation. So the
    # admission the wait saw is the one checked: another one may still reach a replica that does not serve yet.
    shoot_ops.wait_until("a pod admitted with intel.com/resources", annotated, 300, 3)
    value = json.loads(seen["value"])
    assert value["containers"]["main"] == POD["spec"]["containers"][0]["resources"]

    t.enable(scenarios.provider_config())

    def gone() -> tuple[bool, str]:
        left = shoot.run("get", "mutatingwebhookconfigurations,deployments,services", "-A",
                         "-l", "app.kubernetes.io/name=cri-resmgr-webhook", "-o", "name").stdout.split()
        return not left, f"left: {left}"
    shoot_ops.wait_until("the webhook's objects removed from the shoot", gone, 300, 3)
    t.delete()


def webhook_pods(shoot: shoot_ops.Kube) -> str:
    r = shoot.run("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=cri-resmgr-webhook",
                  "-o", "wide", "--no-headers", check=False)
    return " | ".join(r.stdout.split("\n")).strip() or r.stderr.strip()
