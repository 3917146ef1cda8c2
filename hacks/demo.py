#!/usr/bin/env python3
"""The local demo (`make demo`): the whole enable -> pin -> disable flow on this machine.

It starts a real seed API (etcd + kube-apiserver with Gardener's CRDs) and a real systemd
node (systemd-nspawn with containerd and a kubelet stand-in), then:

1. runs the extension operator against a Cluster plus an Extension with the example configs;
2. plays gardener-resource-manager: takes what the extension rendered and applies it to the
   node — the installer (install mode, with the rendered static config) and the agent (with the
   rendered dynamic ConfigMaps, the seed API standing in for the shoot API);
3. starts a Guaranteed pod through the relay and shows its pinned cpuset from the cgroup;
4. deletes the Extension, runs the uninstall roll the extension asks for, and checks that the
   node's kubelet files are back byte for byte;
5. prints a summary table and stops everything it started.

The demo reuses the test harness (test/fixtures) for the real components; nothing is mocked
but gardener-resource-manager itself, which cannot run here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for sub in ("test", "test/integration/extension", "test/integration/installer"):
    sys.path.insert(0, str(REPO / sub))

from extension_operator_process import Operator, SeedClient  # noqa: E402
from fixtures.cri_objects import make_container_config, make_pod_config, write_json  # noqa: E402
from fixtures.procs import Process, unix_socket_answers  # noqa: E402
from fixtures.seed_api import SeedAPI  # noqa: E402
from fixtures.systemd_node import SystemdNode, extract_rootfs  # noqa: E402
from fixtures.tools import SETUP_HINT, find_tools  # noqa: E402
from installer_node import (  # noqa: E402
    WATCHED_DIRS,
    installer_argv,
    node_ro_binds,
    prepare_node,
    snapshot,
    write_launcher,
)

NODE_NAME = "demo-node"
RELAY = "/var/run/cri-resmgr/cri-resmgr.sock"
CONFIG_SOCKET = "/var/run/cri-resmgr/cri-resmgr-config.sock"
AGENT_SOCKET = "/var/run/cri-resmgr/cri-resmgr-agent.sock"


class Demo:
    def __init__(self, workdir: Path, keep: bool, executable: Path | None = None) -> None:
        self.workdir = workdir
        self.keep = keep
        self.executable = executable
        self.results: list[tuple[str, str, float]] = []
        self.cleanup: list[Callable[[], None]] = []
        self.tools = find_tools()

    # -- output -------------------------------------------------------------------------
    def step(self, title: str, fn: Callable[[], str]) -> str:
        print(f"\n==> {title}", flush=True)
        t0 = time.monotonic()
        try:
            outcome = fn()
        except Exception as exc:
            self.results.append((title, f"FAILED: {exc}", time.monotonic() - t0))
            raise
        took = time.monotonic() - t0
        self.results.append((title, outcome, took))
        print(f"    {outcome} ({took:.1f}s)", flush=True)
        return outcome

    def summary(self) -> None:
        width = max(len(t) for t, _, _ in self.results)
        print("\n" + "=" * 100)
        print(f"{'step'.ljust(width)} | {'time':>6} | result")
        print("-" * 100)
        for title, outcome, took in self.results:
            print(f"{title.ljust(width)} | {took:5.1f}s | {outcome}")
        print("=" * 100, flush=True)

    def log(self, text: str) -> None:
        for line in text.rstrip().splitlines():
            print(f"    {line}", flush=True)

    # -- the flow -------------------------------------------------------------------------
    def start_seed(self) -> str:
        self.seed_api = SeedAPI(self.tools, self.workdir / "seed")
        self.cleanup.append(self.seed_api.stop)
        self.seed_api.start()
        self.seed = SeedClient(self.seed_api)
        return f"kube-apiserver {self.seed_api.version()['gitVersion']} at {self.seed_api.url}, Gardener CRDs ready"

    def start_node(self) -> str:
        rootfs = extract_rootfs(self.tools.rootfs_tar, self.workdir / "rootfs")
        # runc gives each container its own session keyring; nspawn filters those syscalls by default.
        self.node = SystemdNode(rootfs, self.workdir / "node", ro_binds=node_ro_binds(), name=NODE_NAME,
                                extra_args=["--system-call-filter=add_key keyctl request_key"])
        self.node.workdir.mkdir(parents=True, exist_ok=True)
        self.cleanup.append(self.node.poweroff)
        self.node.boot()
        # The node's runc manages pod cgroups in this machine's cgroup v1 hierarchies (cgroupfs
        # driver, as a kubelet node does); nspawn mounts those controllers read-only.
        for d in sorted(Path("/sys/fs/cgroup").iterdir()):
            if d.is_dir() and not d.is_symlink() and d.name not in ("systemd", "unified"):
                subprocess.run(["nsenter", "-t", str(self.node.pid), "-m", "--", "mount", "-o", "remount,bind,rw",
                                str(d)], check=True, capture_output=True)
        self.node.write_file("/etc/hosts", "127.0.0.1 localhost\n")
        self.layout = prepare_node(self.node, "gardener")
        socket = f"{self.node.root}/run/containerd/containerd.sock"
        subprocess.run(["ctr", "--address", socket, "-n", "k8s.io", "images", "import", str(self.tools.images_tar)],
                       check=True, capture_output=True, timeout=120)
        self.before = snapshot(self.node)
        return (f"systemd node pid {self.node.pid}: containerd running, kubelet (stand-in, gardener layout) on "
                f"{self.kubelet_endpoint()}")

    def kubelet_endpoint(self) -> str:
        args = self.node.read_file("/var/lib/kubelet/extra_args").decode() if self.node.exists(
            "/var/lib/kubelet/extra_args") else ""
        found = re.search(r"--container-runtime-endpoint=(\S+?)\"?(\s|$)", args)
        if found:
            return found.group(1) + " (set in /var/lib/kubelet/extra_args)"
        return "unix:///run/containerd/containerd.sock (kubelet.service)"

    def reconcile(self) -> str:
        ns = self.seed_api.create_shoot_namespace("shoot--local--demo")
        self.namespace = ns
        self.seed_api.create_cluster(ns)
        garden = self.seed_api.create_shoot_namespace("garden-demo")
        self.seed.create_configs_configmap(garden, {"fallback": (REPO / "examples/configs/fallback.yaml").read_text()})
        self.operator = Operator(self.seed_api, self.tools, self.workdir / "operator", None,
                                 configmap_namespace=garden, extra_args=["--heartbeat-namespace", garden])
        self.cleanup.append(self.operator.stop)
        self.operator.start()
        configs = {"default": (REPO / "examples/configs/default-topology-aware.yaml").read_text(),
                   # The node shares the host network: keep the metrics port free.
                   "EXTRA_OPTIONS": "--metrics-address=off"}
        self.seed.create_extension(ns, {"apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1",
                                        "kind": "CriResMgrConfig", "configs": configs})
        ext = self.wait(lambda: self._succeeded(), "Extension lastOperation Succeeded", 120)
        objs = self.seed.rendered_objects(ns)
        kinds = sorted({o["kind"] for o in objs})
        return (f"{ns}: lastOperation {ext['status']['lastOperation']['type']}/Succeeded, ManagedResource with "
                f"{len(objs)} objects ({', '.join(kinds)})")

    def _succeeded(self) -> dict | None:
        ext = self.seed.extension(self.namespace)
        op = ((ext or {}).get("status") or {}).get("lastOperation") or {}
        if op.get("state") == "Error":
            raise RuntimeError(f"extension reconcile failed: {op.get('description')}")
        return ext if op.get("state") == "Succeeded" else None

    def rendered(self, kind: str, name: str) -> dict:
        for obj in self.seed.rendered_objects(self.namespace):
            if obj["kind"] == kind and obj["metadata"]["name"] == name:
                return obj
        raise RuntimeError(f"the extension rendered no {kind} {name}")

    def installer_mode(self) -> str:
        ds = self.rendered("DaemonSet", "cri-resmgr-installer")
        for c in ds["spec"]["template"]["spec"]["containers"]:
            for env in c.get("env", []):
                if env["name"] == "CRI_RESMGR_INSTALLER_MODE":
                    return env["value"]
        return "install"

    def run_installer(self, mode: str) -> subprocess.CompletedProcess:
        cm = self.rendered("ConfigMap", "cri-resmgr-installer-config")
        config_dir = self.workdir / f"installer-config-{mode}"
        shutil.rmtree(config_dir, ignore_errors=True)
        config_dir.mkdir(parents=True)
        for key, value in (cm.get("data") or {}).items():
            (config_dir / key).write_text(value)
        # The single-file build when given (make demo), else a launcher into this checkout's venv.
        binary = self.executable or write_launcher(self.workdir)
        argv = installer_argv(self.node, binary, config_dir, self.workdir / "ready", "--once", "--mode", mode)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=str(REPO))
        self.log("\n".join(line for line in r.stderr.splitlines()[-8:]))
        if r.returncode != 0:
            raise RuntimeError(f"installer ({mode}) exited {r.returncode}")
        return r

    def install(self) -> str:
        mode = self.installer_mode()
        if mode != "install":
            raise RuntimeError(f"the extension rendered installer mode {mode!r}, expected install")
        self.run_installer("install")
        unit = self.node.systemctl("is-active", "cri-resource-manager.service", check=False).stdout.strip()
        what = "single-file executable" if self.executable else "venv launcher"
        return f"cri-resource-manager.service {unit} ({what}); kubelet now on {self.kubelet_endpoint()}"

    def start_agent(self) -> str:
        core_objs = [o for o in self.seed.rendered_objects(self.namespace)
                     if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("cri-resmgr-config.")]
        self.seed_api.kubectl("create", "namespace", "kube-system", check=False)
        for cm in core_objs:
            self.seed_api.kubectl("apply", "-f", "-", input=json.dumps(cm))
        self.seed_api.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME}}))
        agent = Process("cri-resmgr-agent", [
            str(Path(sys.executable).parent / "cri-resmgr-agent"), "--kubeconfig", self.seed_api.kubeconfig,
            "--config-socket", str(self.node.path(CONFIG_SOCKET)), "--agent-socket",
            str(self.node.path(AGENT_SOCKET)), "--log-format", "text"], self.workdir,
            env={**os.environ, "NODE_NAME": NODE_NAME})
        self.cleanup.append(agent.stop)
        self.agent = agent
        agent.wait_until(lambda: unix_socket_answers(str(self.node.path(AGENT_SOCKET))), "agent socket", 60)
        try:
            source = self.wait(lambda: self._node_annotation("config-source"), "the agent's config-source annotation",
                               60)
        except TimeoutError:
            self.log(agent.log_tail())
            raise
        return f"agent pushed {source} ({len(core_objs)} dynamic ConfigMap(s) from the rendered chart)"

    def _node_annotation(self, key: str) -> str | None:
        out = self.seed_api.kubectl("get", "node", NODE_NAME, "-o", "json").stdout
        annotations = json.loads(out)["metadata"].get("annotations") or {}
        return annotations.get(f"cri-resource-manager.intel.com/{key}")

    def crictl(self, *args: str) -> str:
        endpoint = f"unix://{self.node.path(RELAY)}"
        r = subprocess.run([self.tools.crictl, "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
                            "--timeout", "60s", *args], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"crictl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout.strip()

    def pinned_pod(self) -> str:
        config = make_pod_config("guaranteed", qos="guaranteed")
        # Host network: the node shares this machine's network namespace and may not create bridges.
        config["linux"]["security_context"]["namespace_options"]["network"] = 2
        config.pop("hostname")  # a host-network pod shares the node's UTS namespace
        pod = write_json(self.workdir / "pod.json", config)
        ctr = write_json(self.workdir / "ctr.json", make_container_config(
            "app", cpu_shares=1024, cpu_quota=100000, cpu_period=100000, memory_limit=64 * 1024 * 1024))
        pod_id = self.crictl("runp", pod)
        cid = self.crictl("create", pod_id, ctr, pod)
        self.crictl("start", cid)
        self.pod_id = pod_id
        info = json.loads(self.crictl("inspect", cid))
        cgroup = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
        # The node's runc uses this machine's cgroup hierarchy, so read the host's own files.
        host_cgroup = Path("/sys/fs/cgroup/cpuset") / cgroup
        cpus = (host_cgroup / "cpuset.cpus").read_text().strip()
        mems = (host_cgroup / "cpuset.mems").read_text().strip()
        requested = info["info"]["runtimeSpec"]["linux"]["resources"].get("cpu", {}).get("cpus", "")
        if not cpus or cpus != requested:
            raise RuntimeError(f"cgroup cpuset {cpus!r} differs from what the relay set ({requested!r})")
        return f"Guaranteed 1-CPU container {cid[:12]}: host {host_cgroup}/cpuset.cpus={cpus} mems={mems}"

    def disable(self) -> str:
        self.crictl("stopp", self.pod_id)
        self.crictl("rmp", self.pod_id)
        self.seed_api.kubectl("annotate", "extension", "-n", self.namespace, "--all",
                              "gardener.cloud/operation=reconcile", "--overwrite", check=False)
        self.seed.delete_extension(self.namespace)
        self.wait(lambda: self.installer_mode() == "uninstall", "the extension to roll the installer to uninstall", 60)
        self.run_installer("uninstall")
        # As gardener-resource-manager would once the uninstall DaemonSet is healthy.
        self.seed.set_mr_conditions(self.namespace)
        self.wait(lambda: self.seed.extension(self.namespace) is None, "the Extension to be gone", 120)
        after = snapshot(self.node)
        changed = sorted(k for k in set(self.before) | set(after) if self.before.get(k) != after.get(k))
        if changed:
            raise RuntimeError(f"node not restored: {changed}")
        unit = self.node.systemctl("is-active", "cri-resource-manager.service", check=False).stdout.strip()
        return (f"Extension deleted after the uninstall roll; unit {unit or 'gone'}; kubelet on "
                f"{self.kubelet_endpoint()}; {len(self.before)} files in {len(WATCHED_DIRS)} dirs identical")

    def wait(self, check: Callable[[], Any], what: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

    def run(self) -> int:
        ok = False
        try:
            self.step("1. seed API (etcd + kube-apiserver)", self.start_seed)
            self.step("2. systemd node (containerd + kubelet)", self.start_node)
            self.step("3. extension reconciles Cluster + Extension", self.reconcile)
            self.step("4. installer applies the rendered chart", self.install)
            self.step("5. agent pushes the dynamic config", self.start_agent)
            self.step("6. Guaranteed pod pinned through the relay", self.pinned_pod)
            self.step("7. disable: uninstall roll, node restored", self.disable)
            ok = True
        except Exception:
            traceback.print_exc()
        finally:
            self.summary()
            if not self.keep:
                for stop in reversed(self.cleanup):
                    try:
                        stop()
                    except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                        print(f"cleanup: {exc}", file=sys.stderr)
                shutil.rmtree(self.workdir, ignore_errors=True)
        print("demo: " + ("all steps passed" if ok else "FAILED (see above)"), flush=True)
        return 0 if ok else 1


def main() -> int:
    # The local seed API serves a self-signed certificate on loopback.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="leave everything running for inspection")
    parser.add_argument("--executable", type=Path, metavar="PATH",
                        help="the single-file cri-resmgr to install on the node (make demo builds "
                             "_out/bin/cri-resmgr); default: a launcher into this checkout's venv")
    args = parser.parse_args()
    if args.executable is not None and not os.access(args.executable, os.X_OK):
        print(f"demo: {args.executable} is not an executable file; build it with `make build-exe`", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("demo: must run as root (containerd, systemd-nspawn)", file=sys.stderr)
        return 2
    try:
        demo = Demo(Path(tempfile.mkdtemp(prefix="cri-resmgr-demo-", dir="/tmp")), args.keep,
                    args.executable.resolve() if args.executable else None)
    except RuntimeError as exc:
        print(f"demo: {exc}; {SETUP_HINT}", file=sys.stderr)
        return 2
    return demo.run()


if __name__ == "__main__":
    sys.exit(main())
