"""Both charts pass helm lint, render without the Go chart's defects, and a real kube-apiserver
accepts everything they render (server-side dry run with strict field validation)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
EXT_CHART = REPO / "charts" / "gardener-extension-cri-resmgr"
INSTALL_CHART = REPO / "charts" / "internal" / "cri-resmgr-installation"


class StrictLoader(yaml.SafeLoader):
    """Duplicate keys (the Go chart's double readinessProbe) are errors."""


def _no_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        assert key not in seen, f"duplicate key {key!r} at {key_node.start_mark}"
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def helm(tools, *args, values=None):
    r = subprocess.run([tools.helm, *args, *(["--values", "-"] if values is not None else [])],
                       input=json.dumps(values) if values is not None else None,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


INSTALL_VALUES = {
    "images": {"installer": "reg/installer:v1", "agent": "reg/agent:v1"},
    "configs": {"static": {"fallback": "policy:\n  Active: none\n", "force": "policy:\n  Active: static\n",
                           "EXTRA_OPTIONS": "--log-level=debug"},
                "dynamic": {"default": {"policy": "Active: topology-aware\n"},
                            "node.worker-1": {"policy": "Active: balloons\n"},
                            "pool.a": {"policy": "Active: balloons\n"},
                            "group.db": {"policy": "Active: static\n", "logger": "Debug: policy\n"}}},
    "nodeSelector": {"example.com/x": "y"},
    "workerPools": ["a", "b"],
}

EXT_VALUES = {
    "configs": {"default": "policy:\n  Active: topology-aware\n", "fallback": "policy:\n  Active: none\n"},
    "imageVectorOverwrite": "images:\n- name: gardener-extension-cri-resmgr-agent\n  repository: r/a\n  tag: v2\n",
    "controller": {"ignoreOperationAnnotation": True},
}


def walk(obj):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def check_no_go_chart_defects(docs):
    for doc in docs:
        for node in walk(doc):
            assert "periodseconds" not in node
            sc = node.get("securityContext")
            if isinstance(sc, dict):
                assert "resources" not in sc
            for mount in node.get("volumeMounts", []) or []:
                assert set(mount) <= {"name", "mountPath", "readOnly", "mountPropagation", "subPath",
                                      "subPathExpr", "recursiveReadOnly"}, mount


@pytest.mark.parametrize("chart", [EXT_CHART, INSTALL_CHART], ids=["extension", "installation"])
def test_helm_lint(tools, chart):
    out = helm(tools, "lint", "--strict", str(chart))
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("mode", ["install", "uninstall"])
def test_installation_chart_renders_and_the_api_accepts_it(tools, seed_api, mode):
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                values={**INSTALL_VALUES, "installer": {"mode": mode}})
    docs = [d for d in yaml.load_all(text, Loader=StrictLoader) if d]
    check_no_go_chart_defects(docs)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("DaemonSet", "cri-resmgr-installer") in kinds
    assert (("DaemonSet", "cri-resmgr-agent") in kinds) is (mode == "install")
    assert ("ConfigMap", "cri-resmgr-config.group.db") in kinds
    assert ("ConfigMap", "cri-resmgr-config.pool.a") in kinds
    assert ("CustomResourceDefinition", "adjustments.criresmgr.intel.com") in kinds
    for d in docs:
        if d["kind"] == "DaemonSet":
            pod = d["spec"]["template"]
            # Node-critical: the installers, on the DaemonSet too (gardener-resource-manager's node controller
            # waits for a DaemonSet's pod only when the DaemonSet carries the label); the agent is not.
            critical = d["metadata"]["name"] != "cri-resmgr-agent"
            assert (pod["metadata"]["labels"].get("node.gardener.cloud/critical-component") == "true") is critical
            assert (d["metadata"]["labels"].get("node.gardener.cloud/critical-component") == "true") is critical
            assert pod["spec"]["priorityClassName"].startswith("gardener-shoot-system-")
            assert {"effect": "NoExecute", "operator": "Exists"} in pod["spec"]["tolerations"]
            probes = [c.get("readinessProbe") for c in pod["spec"]["containers"]]
            assert all(probes)
    r = seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text)
    assert r.stdout.count("(server dry run)") == len(docs)


def test_extension_chart_renders_and_the_api_accepts_it(tools, seed_api):
    ns = seed_api.create_shoot_namespace("garden-chart-test")
    text = helm(tools, "template", "gardener-extension-cri-resmgr", str(EXT_CHART), "--namespace", ns,
                values=EXT_VALUES)
    docs = [d for d in yaml.load_all(text, Loader=StrictLoader) if d]
    check_no_go_chart_defects(docs)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    cm = by[("ConfigMap", "gardener-extension-cri-resmgr-configs")]
    assert cm["data"] == EXT_VALUES["configs"]
    assert ("ConfigMap", "gardener-extension-cri-resmgr-imagevector-overwrite") in by
    deploy = by[("Deployment", "gardener-extension-cri-resmgr")]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert "--ignore-operation-annotation" in container["command"]
    assert "--heartbeat-interval=30" in container["command"]
    assert "--base-configs-interval=10" in container["command"]
    assert "--metrics-allow-pod-network" not in container["command"]  # opt-in: it admits every pod
    # Gardener's seed NetworkPolicies (allow-to-runtime-apiserver, allow-to-dns) select pods by these labels.
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["networking.gardener.cloud/to-runtime-apiserver"] == "allowed"
    assert pod_labels["networking.gardener.cloud/to-dns"] == "allowed"
    # Base configs are read live: changing them must not restart the pod (no checksum of values.configs).
    assert "checksum/configs" not in (deploy["spec"]["template"]["metadata"].get("annotations") or {})
    env = {e["name"]: e for e in container["env"]}
    assert env["EXTENSION_CONFIGMAP_NAMESPACE"]["value"] == ns
    assert env["IMAGEVECTOR_OVERWRITE"]["value"] == "/charts_overwrite/images_overwrite.yaml"
    # Gardener's rules for extensions: the seed PriorityClass gardenlet provides, none of our own.
    assert not [d for d in docs if d["kind"] == "PriorityClass"]
    assert deploy["spec"]["template"]["spec"]["priorityClassName"] == "gardener-system-900"
    assert deploy["metadata"]["labels"]["high-availability-config.resources.gardener.cloud/type"] == "controller"
    pdb = by[("PodDisruptionBudget", "gardener-extension-cri-resmgr")]
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # The seed Prometheus scrapes extension pods by annotation; the Service lets it past the deny-all policies.
    annotations = deploy["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert f"--metrics-bind-address=0.0.0.0:{annotations['prometheus.io/port']}" in container["command"]
    service = by[("Service", "gardener-extension-cri-resmgr-metrics")]
    assert json.loads(service["metadata"]["annotations"][
        "networking.resources.gardener.cloud/from-all-seed-scrape-targets-allowed-ports"]) == [
        {"port": int(annotations["prometheus.io/port"]), "protocol": "TCP"}]
    assert service["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    vpa = by[("VerticalPodAutoscaler", "gardener-extension-cri-resmgr-vpa")]
    assert vpa["spec"]["resourcePolicy"]["containerPolicies"][0]["controlledValues"] == "RequestsOnly"
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]  # nothing seed-global (no kopf peering)
    r = seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text)
    assert r.stdout.count("(server dry run)") == len(docs)
    no_vpa = helm(tools, "template", "x", str(EXT_CHART), "--set", "vpa.enabled=false")
    assert "kind: VerticalPodAutoscaler" not in no_vpa


def test_rbac_is_least_privilege(tools):
    text = helm(tools, "template", "x", str(EXT_CHART), "--namespace", "garden")
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            for rule in d["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    secrets = next(r for r in cluster_role["rules"] if r["resources"] == ["secrets"])
    assert sorted(secrets["verbs"]) == ["create", "delete", "list", "patch"]  # what managed_resources does
    role = next(d for d in docs if d["kind"] == "Role")
    cm_rule = next(r for r in role["rules"] if r["resources"] == ["configmaps"])
    assert cm_rule["verbs"] == ["get"] and cm_rule["resourceNames"] == ["gardener-extension-cri-resmgr-configs"]


def test_agent_rbac_allows_what_the_agent_does_and_no_more(tools, seed_api):
    """Applied for real (the test API stands in for the shoot), then asked with `kubectl auth can-i`."""
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                values=INSTALL_VALUES)
    seed_api.kubectl("apply", "-f", "-", input=text)
    agent = "system:serviceaccount:kube-system:cri-resmgr-agent"
    installer = "system:serviceaccount:kube-system:cri-resmgr-installer"

    def can(who, *args):
        r = seed_api.kubectl("auth", "can-i", *args, f"--as={who}", check=False)
        return r.stdout.strip() == "yes"

    allowed = [("watch", "configmaps", "-n", "kube-system"), ("list", "configmaps", "-n", "kube-system"),
               ("watch", "nodes"), ("patch", "nodes"), ("create", "events", "-n", "default"),
               ("watch", "adjustments.criresmgr.intel.com", "-n", "kube-system"),
               ("patch", "adjustments.criresmgr.intel.com", "--subresource=status", "-n", "kube-system"),
               # placement Events on pods, in the pods' namespaces
               ("create", "events", "-n", "prod"), ("patch", "events", "-n", "prod")]
    denied = [("list", "configmaps", "-n", "default"), ("update", "configmaps", "-n", "kube-system"),
              ("delete", "nodes"), ("list", "secrets", "-n", "kube-system"),
              ("update", "adjustments.criresmgr.intel.com", "-n", "kube-system"),
              ("watch", "adjustments.criresmgr.intel.com", "-n", "default"), ("delete", "events", "-n", "prod"),
              ("list", "events", "-n", "prod")]
    assert [a for a in allowed if not can(agent, *a)] == []
    assert [d for d in denied if can(agent, *d)] == []
    # The installer works on the node only: no API rights of these, but patching nodes where the chart limits it
    # to the frontend label of its own node (ValidatingAdmissionPolicy, test_installer_node_label_policy.py).
    label_rights = [("patch", "nodes")] if "name: cri-resmgr-installer-node-label" in text else []
    assert [a for a in allowed + denied if can(installer, *a)] == label_rights


def test_metrics_are_served_by_the_agents_and_reachable_from_vpn_shoot_only(tools):
    """The Service's endpoints are the agent pods' metrics port, and the NetworkPolicy admits to that port
    only pods labelled app=vpn-shoot (Gardener's vpn-shoot), through which the seed's Prometheus scrapes."""
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                values=INSTALL_VALUES)
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.load_all(text, Loader=StrictLoader) if d}
    agent = docs[("DaemonSet", "cri-resmgr-agent")]
    agent_labels = agent["spec"]["template"]["metadata"]["labels"]
    container = agent["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-address=:8891" in container["command"]
    assert {"name": "metrics", "containerPort": 8891, "protocol": "TCP"} in container["ports"]

    service = docs[("Service", "cri-resmgr-metrics")]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "cri-resmgr-agent"}
    assert service["spec"]["selector"].items() <= agent_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8891, "targetPort": "metrics",
                                         "protocol": "TCP"}]

    policy = docs[("NetworkPolicy", "cri-resmgr-agent-metrics")]
    assert policy["metadata"]["namespace"] == "kube-system"
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= agent_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app": "vpn-shoot"}}}],
                                          "ports": [{"protocol": "TCP", "port": 8891}]}]

    uninstall = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                     values={**INSTALL_VALUES, "installer": {"mode": "uninstall"}})
    kinds = {d["kind"] for d in yaml.load_all(uninstall, Loader=StrictLoader) if d}
    assert "NetworkPolicy" not in kinds and "Service" not in kinds


def test_agent_runs_non_root_and_mounts_only_its_socket_directory(tools):
    """The agent sees its own socket directory (the sockets the installer's unit gives cri-resmgr), never the
    relay's CRI socket, and runs as the group that directory belongs to."""
    from installer import node_files
    from resmgr import options

    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                values=INSTALL_VALUES)
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.load_all(text, Loader=StrictLoader) if d}
    pod = docs[("DaemonSet", "cri-resmgr-agent")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    host_paths = [v["hostPath"] for v in pod["volumes"] if "hostPath" in v]
    assert host_paths == [{"path": options.AGENT_SOCKET_DIR, "type": "Directory"}]
    assert [m["mountPath"] for m in container["volumeMounts"]] == [options.AGENT_SOCKET_DIR]
    assert not options.DEFAULT_RELAY_SOCKET.startswith(options.AGENT_SOCKET_DIR + "/")
    sc = container["securityContext"]
    assert (sc["runAsNonRoot"], sc["runAsUser"], sc["runAsGroup"]) == (True, options.AGENT_SOCKET_GROUP,
                                                                       options.AGENT_SOCKET_GROUP)
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    # The agent's flags name the same sockets the relay is started with.
    relay_flags = node_files.render_default(node_files.StaticConfig(), node_files.UnitSettings("unix:///c.sock"))
    for agent_flag, relay_flag, path in (("--agent-socket", "--agent-socket", options.AGENT_DIR_AGENT_SOCKET),
                                         ("--config-socket", "--config-socket", options.AGENT_DIR_CONFIG_SOCKET),
                                         ("--relay-metrics-socket", "--metrics-socket",
                                          options.AGENT_DIR_METRICS_SOCKET)):
        assert f"{agent_flag}={path}" in container["command"]
        assert f"{relay_flag}={path}".encode() in relay_flags
    assert f"--agent-socket={options.AGENT_DIR_AGENT_SOCKET}" in container["readinessProbe"]["exec"]["command"]


def test_the_seed_pod_passes_the_pod_security_level_of_the_registration(tools, seed_api):
    """gardenlet labels extension-<name> with the registration's security.gardener.cloud/pod-security-enforce
    (gardener pkg/gardenlet/controller/controllerinstallation/controllerinstallation/reconciler.go); the
    API server's PodSecurity admission must admit the seed pod at that level."""
    registration = [d for d in yaml.safe_load_all((REPO / "examples/ctrldeploy-ctrlreg.yaml").read_text())
                    if d and d["kind"] == "ControllerRegistration"][0]
    level = registration["metadata"]["annotations"]["security.gardener.cloud/pod-security-enforce"]
    results = {}
    for enforce in sorted({level, "restricted"}):
        ns = f"extension-psa-{enforce}"
        labels = {"gardener.cloud/role": "extension", "pod-security.kubernetes.io/enforce": enforce}
        seed_api.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}))
        docs = [d for d in yaml.safe_load_all(helm(tools, "template", "cri-resmgr-extension", str(EXT_CHART),
                                                   "--namespace", ns)) if d]
        [sa] = [d for d in docs if d["kind"] == "ServiceAccount"]
        seed_api.kubectl("apply", "-f", "-", input=json.dumps(sa))
        [deployment] = [d for d in docs if d["kind"] == "Deployment"]
        template = deployment["spec"]["template"]
        template["spec"].pop("priorityClassName", None)  # gardenlet's PriorityClasses are not on this API server
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa", "namespace": ns, **template["metadata"]},
               "spec": template["spec"]}
        r = seed_api.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        results[enforce] = (r.returncode, r.stderr)
    assert level == "restricted", f"the registration asks for {level!r}; the seed pod passes restricted"
    assert results["restricted"][0] == 0, results["restricted"][1]


def nri_values(**kw):
    """The chart's values for a shoot in relay mode with an nri pool and an auto pool, as the extension makes them."""
    from extension.installation import InstallationValues

    static = {"fallback": "policy:\n  Active: none\n", "EXTRA_OPTIONS": "--log-level=debug"}
    v = InstallationValues(images=INSTALL_VALUES["images"], frontend="relay", pool_frontends={"a": "nri", "b": "auto"},
                           static_configs=static,
                           dynamic_configs={"default": {"policy": "Active: static\n"}}, digest="d1", **kw)
    return v.chart_values()


def test_nri_mode_renders_an_installer_per_mode_and_the_plugin_and_the_api_accepts_it(tools, seed_api):
    from installer import node_files, node_label
    from resmgr import options

    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                "--kube-version", "1.33.0", values=nri_values())
    docs = [d for d in yaml.load_all(text, Loader=StrictLoader) if d]
    check_no_go_chart_defects(docs)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}

    def affinity(ds):
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        return [(e["operator"], e["values"]) for t in terms for e in t["matchExpressions"]]

    installers = {name: by[("DaemonSet", name)] for name in
                  ("cri-resmgr-installer", "cri-resmgr-installer-nri", "cri-resmgr-installer-auto")}
    assert affinity(installers["cri-resmgr-installer"]) == [("NotIn", ["a", "b"])]
    assert affinity(installers["cri-resmgr-installer-nri"]) == [("In", ["a"])]
    assert affinity(installers["cri-resmgr-installer-auto"]) == [("In", ["b"])]
    for name, mode in (("cri-resmgr-installer", "install"), ("cri-resmgr-installer-nri", "nri"),
                       ("cri-resmgr-installer-auto", "auto")):
        pod = installers[name]["spec"]["template"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["CRI_RESMGR_INSTALLER_MODE"] == mode and env["CRI_RESMGR_INSTALLER_DIGEST"] == "d1"
        assert pod["metadata"]["labels"]["node.gardener.cloud/critical-component"] == "true"

    plugin = by[("DaemonSet", "cri-resmgr-nri")]
    pod = plugin["spec"]["template"]
    spec = pod["spec"]
    # An ordinary pod: not node-critical, no host network or PID namespace, no API token, no capability.
    assert "node.gardener.cloud/critical-component" not in pod["metadata"]["labels"]
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and spec["automountServiceAccountToken"] is False
    assert spec["nodeSelector"][node_label.FRONTEND_LABEL] == node_label.NRI
    assert affinity(plugin) == [("In", ["a", "b"])]
    [container] = spec["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
    host_paths = {v["hostPath"]["path"]: v["name"] for v in spec["volumes"] if "hostPath" in v}
    assert set(host_paths) == {"/var/run/nri", options.AGENT_SOCKET_DIR, node_files.RELAY_STATE_DIR, "/sys/fs/cgroup"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts[host_paths["/sys/fs/cgroup"]]["readOnly"] is True
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # The same sockets the relay's unit gives cri-resmgr, so the agent (and through it the metrics Service, the
    # ScrapeConfig and the alerts) works unchanged.
    relay_flags = node_files.render_default(node_files.StaticConfig(), node_files.UnitSettings("unix:///c.sock"))
    for flag in (f"--config-socket={options.AGENT_DIR_CONFIG_SOCKET}",
                 f"--agent-socket={options.AGENT_DIR_AGENT_SOCKET}",
                 f"--metrics-socket={options.AGENT_DIR_METRICS_SOCKET}"):
        assert flag in container["command"] and flag.encode() in relay_flags
    assert container["command"][:2] == ["/usr/local/bin/cri-resmgr", "--frontend=nri"]
    assert f"--relay-dir={node_files.RELAY_STATE_DIR}" in container["command"]
    assert "--fallback-config=/etc/cri-resmgr/fallback.cfg" in container["command"]
    assert container["command"][-2] == "--log-level=debug"  # the extra arguments, from EXTRA_OPTIONS
    # The readiness probe's port, served whatever EXTRA_OPTIONS say (the landscape's say --metrics-address=off,
    # and the probe never passed: found by the NRI demo): last, so that it wins.
    assert container["command"][-1] == "--metrics-address=:8891"
    assert {"name": "metrics", "containerPort": 8891, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["tcpSocket"] == {"port": "metrics"}
    assert by[("Service", "cri-resmgr-metrics")]["spec"]["selector"] == {"app.kubernetes.io/name": "cri-resmgr-agent"}
    assert ("DaemonSet", "cri-resmgr-agent") in by
    r = seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text)
    assert r.stdout.count("(server dry run)") == len(docs)

    # Uninstall: one installer on every selected node, no plugin.
    values = nri_values(mode="uninstall")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in yaml.load_all(
        helm(tools, "template", "x", str(INSTALL_CHART), "--kube-version", "1.33.0", values=values),
        Loader=StrictLoader) if d}
    assert {n for k, n in kinds if k == "DaemonSet"} == {"cri-resmgr-installer"}
