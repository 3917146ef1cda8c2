"""The local demo's steps (`make demo`, hacks/demo.py, which lists them): cri-resmgr enabled, exercised and disabled
on a local landscape, its own, or one a test already runs (test/e2e/local/test_demo.py)."""

from __future__ import annotations

import json
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from . import Images, Landscape, shoot_ops
from .node_checks import WATCHED_DIRS, NodeRunner, file_digests
from .tools import find_tools
from .workloads import (
    burstable_pod,
    container_cpuset,
    container_id,
    daemonset_rolled_out,
    exclusive_cpus,
    guaranteed_pod,
    wait_placement_event,
    wait_pod_running,
)

REPO = Path(__file__).resolve().parents[1]

# Step 4's config: static, under which a 2-CPU node can give one container a CPU of its own (see the file).
DEFAULT_CONFIG = (REPO / "examples/configs/default-static.yaml").read_text()
# Step 5's: topology-aware without pinning, pushed as the shoot's changed `default` config.
UNPINNED_CONFIG = (REPO / "examples/configs/default-topology-aware.yaml").read_text().replace(
    "PinCPU: true", "PinCPU: false")
# The landscape's nodes share one network namespace: one metrics port cannot serve them all.
EXTRA_OPTIONS = "--metrics-address=off"


RELAY, NRI = "relay", "nri"
# The DaemonSets each mode rolls out (charts/internal/cri-resmgr-installation; extension/installation.py names the
# installer of each mode).
DAEMONSETS = {RELAY: ("cri-resmgr-installer", "cri-resmgr-agent"),
              NRI: ("cri-resmgr-installer-nri", "cri-resmgr-nri", "cri-resmgr-agent")}
FRONTEND_LABEL = "cri-resmgr.gardener.cloud/frontend"  # installer/node_label.py


def provider_config(default: str, mode: str = RELAY) -> dict:
    pc = {"apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
          "configs": {"default": default, "EXTRA_OPTIONS": EXTRA_OPTIONS}}
    if mode != RELAY:
        pc["mode"] = mode
    return pc


# The pods step 4c starts while the plugin is killed, and every pod the steps create in the shoot's default namespace.
START_PODS = tuple(f"demo-start-{i}" for i in range(4))
DEMO_PODS = ("demo-pinned", "demo-burstable", "demo-unpinned", *START_PODS)


class Demo:
    """The demo's steps. With ``landscape``, on that running landscape (a test's shared one): the demo neither
    starts nor stops it, and deletes its pods at the end so that the landscape is left as it found it; otherwise
    on a landscape of its own under ``workdir``, started from ``images_dir`` and stopped at the end (unless
    ``keep``)."""

    def __init__(self, workdir: Path, keep: bool = False, images_dir: Path | None = None, mode: str = RELAY,
                 landscape: Landscape | None = None) -> None:
        self.workdir = workdir
        self.keep = keep
        self.mode = mode
        self.own = landscape is None
        if landscape is None:
            if images_dir is None:
                raise ValueError("a landscape of the demo's own needs images_dir")
            self.tools = find_tools()
            landscape = Landscape(self.tools, workdir / "landscape", Images.from_dir(self.tools, images_dir))
        else:
            self.tools = landscape.tools
        self.land = landscape
        self.results: list[tuple[str, str, float]] = []

    def step(self, title: str, fn: Callable[[], str]) -> None:
        print(f"\n==> {title}", flush=True)
        t0 = time.monotonic()
        try:
            outcome = fn()
        except Exception as exc:
            self.results.append((title, f"FAILED: {exc}".splitlines()[0][:300], time.monotonic() - t0))
            raise
        took = time.monotonic() - t0
        self.results.append((title, outcome, took))
        print(f"    {outcome} ({took:.1f}s)", flush=True)

    def summary(self) -> None:
        width = max(len(t) for t, _, _ in self.results)
        print("\n" + "=" * 110)
        print(f"{'step'.ljust(width)} | {'time':>6} | result")
        print("-" * 110)
        for title, outcome, took in self.results:
            print(f"{title.ljust(width)} | {took:5.1f}s | {outcome}")
        print("=" * 110, flush=True)

    # -- steps --------------------------------------------------------------------------
    def landscape(self) -> str:
        if self.own:
            self.land.up()
        self.nodes = self.land.shoot_nodes
        self.runners = [NodeRunner(n) for n in self.nodes]
        self.before = {n.name: file_digests(n) for n in self.nodes}
        self.gardenlet = self.land.gardenlet()
        v = self.land.versions()
        pools = ", ".join(f"{n.name} ({n.spec.pool})" for n in self.nodes)
        return (f"{v['kubelet']} on {pools}; seed node {self.land.seed_node.name} runs the extension image "
                f"{self.land.extension_image().rsplit('/', 1)[-1]}; Gardener {v['gardener']} "
                f"({v['gardener-resource-manager']}, CRDs); "
                f"images: {self.land.image_source()}")

    def enable(self) -> str:
        self.t_enable = time.monotonic()
        self.gardenlet.write_cluster()
        self.gardenlet.reconcile(provider_config(DEFAULT_CONFIG, self.mode))
        self.gardenlet.wait_ready(300)
        mr = self.land.seed.get_json("managedresource", "-n", self.land.namespace, "extension-runtime-cri-resmgr")
        conds = {c["type"]: c["status"] for c in mr["status"].get("conditions", [])}
        return f"Extension Succeeded; ManagedResource conditions (gardener-resource-manager): {conds}"

    def rollout(self) -> str:
        shoot = self.land.shoot
        for ds in DAEMONSETS[self.mode]:
            shoot_ops.wait_until(f"{ds} rolled out", lambda ds=ds: daemonset_rolled_out(shoot, ds), 300, 1)
        pods = shoot.get_json("pods", "-n", "kube-system")["items"]
        return "Running: " + ", ".join(sorted(f"{p['metadata']['name']}@{p['spec']['nodeName']}" for p in pods
                                               if p["status"].get("phase") == "Running"))

    def repointed(self) -> str:
        eps = self.on_frontend(self.mode)
        self.enable_to_relay = time.monotonic() - self.t_enable
        if self.mode == NRI:
            return (f"kubelet endpoints {eps} (containerd's own: nothing repointed); enable -> the NRI plugin "
                    f"configured on every node in {self.enable_to_relay:.1f}s")
        return f"kubelet endpoints {eps}; enable -> every node on the relay in {self.enable_to_relay:.1f}s"

    def on_frontend(self, mode: str) -> dict[str, str]:
        """Wait until every node runs cri-resmgr in ``mode`` with the agent's config applied; kubelet's endpoint
        by node. The relay: kubelet repointed at it. NRI: the node labelled for the plugin, and kubelet never
        repointed (no relay unit, kubelet still on containerd's socket)."""
        for r in self.runners:
            def labelled(n=r.node) -> tuple[bool, str]:
                # A relay install labels the node relay only over a stale nri (installer/node_label.py); a node the
                # relay installed fresh has no label. Either way the plugin's DaemonSet (nri only) leaves it alone.
                value = (self.land.shoot.get_json("node", n)["metadata"].get("labels") or {}).get(FRONTEND_LABEL)
                return (value != NRI) if mode == RELAY else (value == NRI), f"{n}: {FRONTEND_LABEL}={value}"
            if mode == RELAY:
                shoot_ops.wait_until(f"{r.node} on the relay", shoot_ops.installed_check(r), 300, 1)
            shoot_ops.wait_until(f"{r.node} labelled for {mode}", labelled, 300, 1)
        self.wait_config_applied()
        if mode == NRI:
            for r in self.runners:
                state = shoot_ops.node_state(r)
                if state["unit_installed"] or state["kubelet_endpoint"] != shoot_ops.normalize_endpoint(
                        shoot_ops.CONTAINERD_ENDPOINT):
                    raise RuntimeError(f"{r.node}: NRI mode touched kubelet: {state['kubelet_endpoint']}, "
                                       f"relay unit installed: {state['unit_installed']}")
        return {r.node: shoot_ops.node_kubelet_endpoint(r) for r in self.runners}

    def wait_config_applied(self) -> None:
        for r in self.runners:
            shoot_ops.wait_until(f"{r.node}: agent applied the default config",
                                 lambda n=r.node: shoot_ops.agent_config_applied(self.land.shoot.get_json("node", n)),
                                 120, 1)

    def pinned(self) -> str:
        node = self.nodes[0]
        self.land.shoot.run("apply", "-f", "-", input=_json(guaranteed_pod("demo-pinned", node.name)))
        # A Burstable workload as well: both kinds must survive the uninstall.
        self.land.shoot.run("apply", "-f", "-", input=_json(burstable_pod("demo-burstable", self.nodes[-1].name)))
        pod = wait_pod_running(self.land.shoot, "demo-pinned")
        wait_pod_running(self.land.shoot, "demo-burstable")
        told, cpus = container_cpuset(node, pod)
        self.all_cpus = node.node.run(["cat", f"/sys/fs/cgroup/cpuset{node.cgroup_root}/cpuset.cpus"]).stdout.strip()
        if not told or told != cpus or cpus == self.all_cpus:
            raise RuntimeError(f"not pinned: {self.mode} set {told!r}, cgroup has {cpus!r}, node has {self.all_cpus!r}")
        # Exclusive: no other running container on the node (system pods, the agent, ...) has any of its CPUs.
        cpus, others = exclusive_cpus(node, pod)
        # What an operator reads with kubectl: the agent's placement Event on the pod.
        event = wait_placement_event(self.land.shoot, "demo-pinned")
        if event["reason"] != "CPUsPinned":
            raise RuntimeError(f"pinned, yet the pod's placement Event says {event['reason']}: {event['message']}")
        return (f"static policy: pod demo-pinned on {node.name} has an exclusive CPU: host cgroup cpuset.cpus={cpus} "
                f"(node has {self.all_cpus}; the {len(others)} other containers there: "
                f"{','.join(sorted(set(others.values())))}); Event {event['reason']}: {event['message']}")

    def switch_mode(self, mode: str) -> str:
        """A live mode switch (providerConfig ``mode``), no drain: the old mode's DaemonSets go, the new ones roll
        out, and the pinned pod keeps its container and its exclusive CPU (docs/operations/nri-mode-switch.md)."""
        shoot, node = self.land.shoot, self.nodes[0]
        pod = wait_pod_running(shoot, "demo-pinned")
        cid = pod["status"]["containerStatuses"][0]["containerID"]
        _, cpus = container_cpuset(node, pod)
        t0 = time.monotonic()
        self.gardenlet.reconcile(provider_config(DEFAULT_CONFIG, mode))
        self.gardenlet.wait_ready(300)
        for ds in DAEMONSETS[mode]:
            shoot_ops.wait_until(f"{ds} rolled out", lambda ds=ds: daemonset_rolled_out(shoot, ds), 300, 1)
        for ds in sorted(set(DAEMONSETS[RELAY] + DAEMONSETS[NRI]) - set(DAEMONSETS[mode])):
            shoot_ops.wait_until(f"{ds} removed", lambda ds=ds: daemonset_gone(shoot, ds), 300, 1)
        eps = self.on_frontend(mode)
        took = time.monotonic() - t0
        after = wait_pod_running(shoot, "demo-pinned")
        status = after["status"]["containerStatuses"][0]
        if status["containerID"] != cid or status.get("restartCount", 0):
            raise RuntimeError(f"demo-pinned's container changed in the switch: {cid} -> {status['containerID']}, "
                               f"{status.get('restartCount')} restarts")
        now, others = exclusive_cpus(node, after)
        if now != cpus:
            raise RuntimeError(f"demo-pinned's CPUs changed in the switch to {mode}: {cpus} -> {now}")
        return (f"every node on {mode} in {took:.1f}s (kubelet endpoints {eps}); demo-pinned kept container "
                f"{cid.split('://')[-1][:12]} and its exclusive cpuset.cpus={now} ({len(others)} other containers)")

    def plugin_killed(self) -> str:
        """The plugin of a node killed (SIGKILL) while pods start there: the pods still start, and the plugin comes
        back and synchronizes (a dead plugin costs placement, never pod starts)."""
        shoot, node = self.land.shoot, self.nodes[-1]
        names = START_PODS
        plugin = plugin_pod(shoot, node.name)
        restarts = plugin["status"]["containerStatuses"][0].get("restartCount", 0)
        for name in names[:2]:
            shoot.run("apply", "-f", "-", input=_json(burstable_pod(name, node.name)))
        pid = json.loads(node.node.run(["crictl", "inspect", container_id(plugin)]).stdout)["info"]["pid"]
        node.node.run(["kill", "-KILL", str(pid)])
        for name in names[2:]:
            shoot.run("apply", "-f", "-", input=_json(burstable_pod(name, node.name)))
        for name in names:
            wait_pod_running(shoot, name)

        def back() -> tuple[bool, str]:
            p = plugin_pod(shoot, node.name)
            st = (p["status"].get("containerStatuses") or [{}])[0]
            return st.get("restartCount", 0) > restarts and bool(st.get("ready")), f"plugin: {json.dumps(st)[:300]}"
        shoot_ops.wait_until("the plugin restarted and Ready", back, 180, 1)
        shoot.run("delete", "pod", *names, "--wait=false")
        return (f"plugin pid {pid} on {node.name} killed while {len(names)} pods started: all Running; the plugin "
                f"restarted ({restarts} -> {restarts + 1}+ restarts) and Ready")

    def config_change(self) -> str:
        node = self.nodes[0]
        before = self.land.shoot.get_json("node", node.name)["metadata"]["annotations"].get(shoot_ops.CONFIG_SOURCE)
        self.gardenlet.reconcile(provider_config(UNPINNED_CONFIG, self.mode))
        self.gardenlet.wait_ready(300)

        def pushed() -> tuple[bool, str]:
            ann = self.land.shoot.get_json("node", node.name)["metadata"].get("annotations") or {}
            ok, why = shoot_ops.agent_config_applied({"metadata": {"name": node.name, "annotations": ann}})
            return ok and ann.get(shoot_ops.CONFIG_SOURCE) != before, why or f"still {before}"
        shoot_ops.wait_until("the agent pushed the changed default config", pushed, 180, 1)
        # The node has 2 CPUs: the pinned pod makes room for its unpinned twin.
        self.land.shoot.run("delete", "pod", "demo-pinned", "--wait=true", timeout=120)
        self.land.shoot.run("apply", "-f", "-", input=_json(guaranteed_pod("demo-unpinned", node.name)))
        pod = wait_pod_running(self.land.shoot, "demo-unpinned")
        told, cpus = container_cpuset(node, pod)
        if cpus != self.all_cpus:
            raise RuntimeError(f"PinCPU: false, yet the new pod's cgroup has {cpus!r} ({self.mode} set {told!r})")
        event = wait_placement_event(self.land.shoot, "demo-unpinned")
        if event["reason"] != "NotPinned" or "not pinned: " not in event["message"]:
            raise RuntimeError(f"unpinned, yet the pod's placement Event says {event['reason']}: {event['message']}")
        return (f"topology-aware with PinCPU: false reached {node.name} (policy switched live); new Guaranteed pod "
                f"cpuset.cpus={cpus} (not pinned); Event {event['reason']}: {event['message']}")

    def disable(self) -> str:
        self.t_disable = time.monotonic()
        self.gardenlet.delete_extension()
        self.gardenlet.wait_gone(600)
        return f"Extension gone after {time.monotonic() - self.t_disable:.1f}s (uninstall roll, then MR deleted)"

    def restored(self) -> str:
        for r in self.runners:
            shoot_ops.wait_until(f"{r.node} restored", shoot_ops.removed_check(r), 300, 1)
        self.disable_to_restored = time.monotonic() - self.t_disable
        for n in self.nodes:
            after = file_digests(n)
            changed = sorted(k for k in set(self.before[n.name]) | set(after)
                             if self.before[n.name].get(k) != after.get(k))
            if changed:
                raise RuntimeError(f"{n.name} not restored: {changed}")
        phases = {p: self.land.shoot.get_json("pod", p)["status"].get("phase")
                  for p in ("demo-burstable", "demo-unpinned")}
        if set(phases.values()) != {"Running"}:
            raise RuntimeError(f"workload pods not Running after disable: {phases}")
        files = sum(len(v) for v in self.before.values())
        return (f"{files} files in {len(WATCHED_DIRS)} dirs identical on {len(self.nodes)} nodes; kubelet on "
                f"containerd; workloads {phases}; disable -> restored in {self.disable_to_restored:.1f}s")

    def run(self) -> int:
        ok = False
        try:
            self.step("0. landscape up (real kubelets, GRM, KCM, scheduler, kube-proxy)" if self.own else
                      "0. the landscape already running (real kubelets, GRM, KCM, scheduler, kube-proxy)",
                      self.landscape)
            with self.land.inside():
                self.step("1. enable (gardenlet stand-in: Cluster + Extension)", self.enable)
                self.step("2. DaemonSets roll out through kubelet", self.rollout)
                self.step("3. installer pods repoint each node's kubelet" if self.mode == RELAY else
                          "3. NRI plugin on every node, kubelet untouched", self.repointed)
                self.step("4. Guaranteed pod on an exclusive CPU (host cgroups)", self.pinned)
                if self.mode == NRI:
                    self.step("4a. live switch to the relay, no drain: the pinned pod keeps its CPU",
                              lambda: self.switch_mode(RELAY))
                    self.step("4b. and back to NRI", lambda: self.switch_mode(NRI))
                    self.step("4c. NRI plugin killed while pods start: the pods start", self.plugin_killed)
                self.step("5. changed default config switches the policy", self.config_change)
                self.step("6+7. disable: uninstall roll", self.disable)
                self.step("8. nodes restored, workloads Running", self.restored)
                if not self.own:
                    self.step("9. the demo's pods deleted (the landscape is not the demo's)", self.delete_pods)
            ok = True
        except Exception:
            traceback.print_exc()
        finally:
            self.summary()
            if not self.own:
                if not ok:  # what the next user of the landscape would trip over
                    try:
                        with self.land.inside():
                            self.delete_pods()
                    except Exception as exc:
                        print(f"demo: {exc}", flush=True)
            elif self.keep:
                st = self.land.state()
                print(f"\nkept running (network namespace {st['netns']}):\n"
                      f"  ip netns exec {st['netns']} {self.tools.kubectl} --kubeconfig {st['shoot_kubeconfig']} "
                      f"get pods -A -o wide\n  stop it: .venv/bin/python hacks/landscape.py --dir {st['workdir']} down",
                      flush=True)
            else:
                left = self.land.down(keep_logs=not ok)
                if left:
                    ok = False
                    print(f"demo: left behind: {left}", flush=True)
                elif ok:
                    shutil.rmtree(self.workdir, ignore_errors=True)
                else:
                    print(f"demo: component logs kept in {self.land.logs}", flush=True)
        print("demo: " + ("all steps passed" if ok else "FAILED (see above)"), flush=True)
        return 0 if ok else 1


    def delete_pods(self) -> str:
        r = self.land.shoot.run("delete", "pod", "--ignore-not-found", "--wait=true", *DEMO_PODS, timeout=180,
                                check=False)
        if r.returncode != 0:
            raise RuntimeError(f"deleting the demo's pods: {r.stderr.strip()}")
        return f"{len(r.stdout.splitlines())} pods deleted and gone"


def daemonset_gone(shoot, name: str) -> tuple[bool, str]:
    r = shoot.run("get", "daemonset", "-n", "kube-system", name, "-o", "name", check=False)
    return r.returncode != 0 and "NotFound" in r.stderr, f"daemonset {name}: {r.stdout.strip() or r.stderr.strip()}"


def plugin_pod(shoot, node: str) -> dict:
    pods = shoot.get_json("pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=cri-resmgr-nri",
                          "--field-selector", f"spec.nodeName={node}")["items"]
    if len(pods) != 1:
        raise RuntimeError(f"{len(pods)} cri-resmgr-nri pods on {node}")
    return pods[0]


def _json(obj: dict) -> str:
    return json.dumps(obj)
