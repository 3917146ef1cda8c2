"""The chart's least-privilege RBAC is enough: the operator runs with the chart's ServiceAccount
token (cluster-wide, with leader election on a Lease in the release namespace, as deployed) and takes
the Lease, reconciles, reports health, heartbeats, deletes and releases the Lease on SIGTERM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from extension_operator_process import Operator, SeedClient, wait_for
from fixtures.seed_api import default_shoot

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def test_operator_works_with_the_charts_rbac(seed_api, tools, tmp_path):
    seed = SeedClient(seed_api)
    ext_ns = seed_api.create_shoot_namespace("garden-rbac")
    rendered = subprocess.run(
        [tools.helm, "template", "gardener-extension-cri-resmgr", str(REPO / "charts/gardener-extension-cri-resmgr"),
         "--namespace", ext_ns,
         "--set-json", 'configs={"fallback":"policy:\\n  Active: none\\n"}'],
        capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] not in ("Deployment",)]
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"], "the seed chart installs no CRD"
    seed_api.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    chart_args = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    lease_name = next(a.split("=", 1)[1] for a in chart_args if a.startswith("--leader-election-id="))
    assert "--leader-election-namespace=$(POD_NAMESPACE)" in chart_args

    token = seed_api.kubectl("-n", ext_ns, "create", "token", "gardener-extension-cri-resmgr",
                             "--duration", "1h").stdout.strip()
    kubeconfig = tmp_path / "sa.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "seed", "cluster": {"server": seed_api.url, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "seed", "user": "sa"}}]}))

    op = Operator(seed_api, tools, tmp_path / "op", None, configmap_namespace=ext_ns,
              extra_args=["--heartbeat-namespace", ext_ns, f"--leader-election-id={lease_name}"],
              leader_election=ext_ns, env={"POD_NAME": "rbac-operator"})
    op.args[op.args.index("--kubeconfig") + 1] = str(kubeconfig)
    op.start()
    try:
        ns = seed_api.create_shoot_namespace(f"shoot--rbac--{tmp_path.name[-6:].lower().replace('_', '-')}")
        seed_api.create_cluster(ns, shoot=default_shoot(ns))
        seed.give_shoot_access(ns)  # the test API server is the shoot too: the nodes' records are read there
        seed.create_extension(ns, {"configs": {"default": "policy:\n  Active: topology-aware\n"}})

        def state():
            return ((seed.extension(ns) or {}).get("status") or {}).get("lastOperation", {}).get("state")

        wait_for(lambda: state() == "Succeeded", "reconcile with the chart's RBAC", timeout=90, operator=op)
        seed.set_mr_conditions(ns)
        wait_for(lambda: any(c["type"] == "SystemComponentsHealthy" and c["status"] == "True"
                             for c in (seed.extension(ns).get("status") or {}).get("conditions") or []),
                 "health condition", operator=op)
        wait_for(lambda: seed.coordination.read_namespaced_lease("gardener-extension-heartbeat", ext_ns),
                 "heartbeat lease", operator=op)
        seed.delete_extension(ns)
        wait_for(lambda: seed.managed_resource(ns) is not None and
                 "uninstall" in json.dumps(seed.rendered_objects(ns)), "uninstall rollout", operator=op)
        seed.set_mr_conditions(ns)
        wait_for(lambda: seed.extension(ns) is None, "delete with the chart's RBAC", operator=op)
        identity = seed.coordination.read_namespaced_lease(lease_name, ext_ns).spec.holder_identity
        assert identity and identity.startswith("rbac-operator_"), identity
        op.stop()
        assert op.process.popen.returncode == 0, op.log_tail()
        assert not seed.coordination.read_namespaced_lease(lease_name, ext_ns).spec.holder_identity, "not released"
        forbidden = [ln for ln in op.log_lines() if "forbidden" in json.dumps(ln).lower()]
        assert not forbidden, forbidden[:3]
    finally:
        op.stop()
