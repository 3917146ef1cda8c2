"""cri-resmgr as an NRI plugin of a real containerd 2: placements land in the host's cgroups without a relay.

crictl talks to containerd's own socket; containerd calls our plugin over its private NRI socket. The
resource manager decides on a fake sysfs tree of this machine's shape (2 CPUs), as in the policy tests.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.containerd import CONTAINERD2, Containerd, running_containerd
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.sysfs_builder import THIS_MACHINE, build_sysfs
from integration.relay.relay_process import RelayProcess

import resmgr
from devland.procs import Process, unix_socket_answers
from devland.waiting import eventually
from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.nri.frontend import NriFrontend
from resmgr.relay.metrics import RelayMetrics
from resmgr.topology import discover_topology, format_cpuset

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"
TOPOLOGY_AWARE = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n"
PERIOD = 100_000
SHAPES = {"guaranteed": {"cpu_shares": 1024, "cpu_quota": PERIOD, "cpu_period": PERIOD, "memory_limit": 64 << 20},
          "besteffort": {"cpu_shares": 2}}


@pytest.fixture(scope="module")
def ctrd2(tools) -> Iterator[Containerd]:
    with running_containerd(tools, "ctrd-nri-", runtime=CONTAINERD2, nri=True) as ctrd:
        yield ctrd


class Plugin:
    """A ResourceManager behind an NriFrontend in this process, registered with ``ctrd``."""

    def __init__(self, ctrd: Containerd, workdir: Path, config_text: str) -> None:
        self.ctrd, self.workdir = ctrd, workdir
        self.sysfs = build_sysfs(workdir / "sysfs", THIS_MACHINE) if not (workdir / "sysfs").exists() \
            else workdir / "sysfs"
        self.config = validate_config_text(config_text)
        self.decisions: list[tuple[str, float]] = []
        self.syncs = 0
        self.rm: ResourceManager | None = None
        self.frontend: NriFrontend | None = None

    def start(self) -> Plugin:
        self.rm = ResourceManager(discover_topology(self.sysfs), relay_dir=self.workdir / "state",
                                  fallback_config=self.config, sysfs_root=str(self.sysfs))
        self.frontend = NriFrontend(self.rm, RelayMetrics(), str(self.ctrd.workdir / "nri" / "nri.sock"),
                                    plugin_name="cri-resmgr-test", plugin_index="90",
                                    observe=self._observe)
        self.rm.outbox.bind(self.frontend.apply_updates)
        self.frontend.start()
        assert self.frontend.registered.wait(30), "did not register with containerd's NRI"
        assert self.frontend.plugin.synchronized.wait(30), "containerd did not synchronize the plugin"
        return self

    def _observe(self, method: str, seconds: float) -> None:
        self.decisions.append((method, seconds))
        self.syncs += method == "Synchronize"

    def stop(self) -> None:
        if self.frontend is not None:
            self.frontend.stop(grace=2)
            self.frontend = None
        if self.rm is not None:
            self.rm.close()

    def expected(self, cid: str) -> tuple[str, str]:
        assert self.rm is not None
        cpus, mems = self.rm.placements()[cid]
        return (cpus or format_cpuset(self.rm.topology.online), mems or format_cpuset(self.rm.topology.nodes))


def run(ctrd: Containerd, workdir: Path, name: str, qos: str) -> str:
    pod_cfg = write_json(workdir / f"pod-{name}.json", make_pod_config(name, qos=qos))
    pod_id = ctrd.crictl("runp", pod_cfg).stdout.strip()
    cfg = write_json(workdir / f"ctr-{name}.json", make_container_config(name, **SHAPES[qos]))
    cid = ctrd.crictl("create", pod_id, cfg, pod_cfg).stdout.strip()
    ctrd.crictl("start", cid)
    return cid


@pytest.fixture
def workdir(ctrd2: Containerd) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="nri-it-", dir="/tmp"))
    yield path
    ctrd2.remove_all()
    shutil.rmtree(path, ignore_errors=True)


def test_static_policy_places_a_guaranteed_container_through_nri(ctrd2: Containerd, workdir: Path) -> None:
    plugin = Plugin(ctrd2, workdir, STATIC).start()
    try:
        be = run(ctrd2, workdir, "be", "besteffort")
        assert ctrd2.cgroup_cpuset(be) == "0-1"
        g = run(ctrd2, workdir, "g", "guaranteed")
        assert plugin.rm is not None
        exclusive = format_cpuset(plugin.rm.policy.grants[g].exclusive)
        reserved = format_cpuset(plugin.rm.policy.reserved)
        assert len(exclusive) == 1 and exclusive != reserved
        # The adjustment of CreateContainer: the cgroup containerd made has the policy's cpuset.
        assert ctrd2.cgroup_cpuset(g) == exclusive == plugin.expected(g)[0]
        # The side effect went through NRI's updates: the best-effort container left the exclusive CPU.
        assert eventually(lambda: ctrd2.cgroup_cpuset(be) == reserved == plugin.expected(be)[0])
        creates = [s * 1000 for m, s in plugin.decisions if m == "CreateContainer"]
        print(f"\nNRI CreateContainer decision latency: n={len(creates)} "
              f"median={statistics.median(creates):.3f} ms max={max(creates):.3f} ms")
        # Freeing the exclusive CPU hands it back to the shared pool.
        ctrd2.crictl("stop", g)
        ctrd2.crictl("rm", g)
        assert eventually(lambda: ctrd2.cgroup_cpuset(be) == "0-1")
    finally:
        plugin.stop()


def test_topology_aware_policy_sets_cpus_and_memory_nodes_through_nri(ctrd2: Containerd, workdir: Path) -> None:
    plugin = Plugin(ctrd2, workdir, TOPOLOGY_AWARE).start()
    try:
        sys_pod = make_pod_config("sys", namespace="kube-system", qos="burstable")
        pod_cfg = write_json(workdir / "pod-sys.json", sys_pod)
        pod_id = ctrd2.crictl("runp", pod_cfg).stdout.strip()
        sys_ctr = ctrd2.crictl("create", pod_id, write_json(workdir / "ctr-sys.json", make_container_config(
            "sys", cpu_shares=512)), pod_cfg).stdout.strip()
        ctrd2.crictl("start", sys_ctr)
        be = run(ctrd2, workdir, "be", "besteffort")
        # Both the cpuset and the memory nodes came with the create's adjustment.
        assert (ctrd2.cgroup_cpuset(sys_ctr), ctrd2.cgroup_mems(sys_ctr)) == ("0", "0") == plugin.expected(sys_ctr)
        assert (ctrd2.cgroup_cpuset(be), ctrd2.cgroup_mems(be)) == ("1", "0") == plugin.expected(be)
        g = run(ctrd2, workdir, "g", "guaranteed")
        assert eventually(lambda: all((ctrd2.cgroup_cpuset(c), ctrd2.cgroup_mems(c)) == plugin.expected(c)
                                      for c in (sys_ctr, be, g)))
    finally:
        plugin.stop()


def test_plugin_restart_resynchronizes_from_synchronize_and_its_cache(ctrd2: Containerd, workdir: Path) -> None:
    plugin = Plugin(ctrd2, workdir, STATIC).start()
    g = run(ctrd2, workdir, "g", "guaranteed")
    assert plugin.rm is not None
    exclusive = format_cpuset(plugin.rm.policy.grants[g].exclusive)
    reserved = format_cpuset(plugin.rm.policy.reserved)
    assert ctrd2.cgroup_cpuset(g) == exclusive
    plugin.stop()
    # While no plugin runs, a container is made that nobody placed: it gets every CPU.
    be = run(ctrd2, workdir, "be", "besteffort")
    assert ctrd2.cgroup_cpuset(be) == "0-1"
    again = Plugin(ctrd2, workdir, STATIC).start()
    try:
        assert again.rm is not None
        # The cache gave back the guaranteed container's CPU; Synchronize adopted the new one and moved it.
        assert format_cpuset(again.rm.policy.grants[g].exclusive) == exclusive
        assert ctrd2.cgroup_cpuset(g) == exclusive
        assert eventually(lambda: ctrd2.cgroup_cpuset(be) == reserved)
    finally:
        again.stop()


def test_cri_resmgr_program_in_nri_mode(ctrd2: Containerd, workdir: Path) -> None:
    """The real program with --nri: no relay socket, and a Guaranteed container gets one CPU of its own."""
    config = workdir / "static.cfg"
    config.write_text(STATIC)
    sysfs = build_sysfs(workdir / "sysfs", THIS_MACHINE)
    relay_socket = workdir / "relay.sock"
    env = dict(os.environ, PYTHONPATH=str(Path(resmgr.__file__).parent.parent))
    log = (workdir / "cri-resmgr.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from resmgr.launch import main; sys.exit(main())", "--nri",
         "--nri-socket", str(ctrd2.workdir / "nri" / "nri.sock"),
         "--force-config", str(config), "--sysfs-root", str(sysfs), "--relay-dir", str(workdir / "state"),
         "--relay-socket", str(relay_socket), "--pid-file", "", "--disable-agent", "--metrics-address", "off",
         "--log-format", "json", "--debug", "nri"], stderr=log, env=env)
    try:
        def logged(msg: str) -> bool:
            return any(json.loads(line).get("msg") == msg
                       for line in (workdir / "cri-resmgr.log").read_text().splitlines() if line.startswith("{"))
        assert eventually(lambda: logged("synchronized with the runtime"), timeout=30)
        start = time.monotonic()
        g = run(ctrd2, workdir, "g", "guaranteed")
        print(f"\nrunp+create+start of a Guaranteed pod through NRI: {time.monotonic() - start:.3f} s")
        cpus = ctrd2.cgroup_cpuset(g)
        assert cpus in ("0", "1")
        assert not relay_socket.exists()
        decided = [json.loads(line) for line in (workdir / "cri-resmgr.log").read_text().splitlines()
                   if line.startswith("{") and json.loads(line).get("msg") == "decided"]
        assert any(d.get("method") == "CreateContainer" for d in decided)
        proc.terminate()
        assert proc.wait(30) == 0  # SIGTERM stops the NRI front end cleanly
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()


def test_containerd_restart_reconnects_and_resynchronizes(ctrd2: Containerd, workdir: Path) -> None:
    """containerd goes away and comes back (its containers keep running in their shims): the plugin connects
    again, registers, is synchronized, and places the next container."""
    plugin = Plugin(ctrd2, workdir, STATIC).start()
    try:
        assert plugin.rm is not None and plugin.frontend is not None
        g = run(ctrd2, workdir, "g", "guaranteed")
        exclusive = format_cpuset(plugin.rm.policy.grants[g].exclusive)
        assert ctrd2.cgroup_cpuset(g) == exclusive and plugin.syncs == 1
        assert ctrd2.proc is not None
        ctrd2.proc.stop()
        assert eventually(lambda: not plugin.frontend.registered.is_set(), timeout=10)
        ctrd2.proc = Process("containerd", [ctrd2.binary("containerd"), "--config", str(ctrd2.workdir / "config.toml"),
                                            "--log-level", "warn"], ctrd2.workdir, env=ctrd2.env)
        ctrd2.proc.wait_until(lambda: unix_socket_answers(ctrd2.socket), "containerd socket", 60)
        assert plugin.frontend.registered.wait(30)
        assert eventually(lambda: plugin.syncs == 2, timeout=30)
        assert format_cpuset(plugin.rm.policy.grants[g].exclusive) == exclusive == ctrd2.cgroup_cpuset(g)
        be = run(ctrd2, workdir, "be", "besteffort")
        assert ctrd2.cgroup_cpuset(be) == format_cpuset(plugin.rm.policy.reserved)
    finally:
        plugin.stop()


# ----- switching a node between the relay and NRI mode (docs/operations/nri-mode-switch.md) -----------------
# The installer's part (the relay's unit stopped, kubelet back on containerd, the cache kept, no cpuset restored:
# NodeInstaller.uninstall(keep_placement=True)) is stood in for by stopping the relay process; shown here is the
# rest: the plugin's Synchronize takes the relay's decisions from the same --relay-dir and places what started
# meanwhile, and back, the relay starts on the plugin's cache.


@pytest.fixture
def node_dir(ctrd2: Containerd) -> Iterator[Path]:
    """The node's cri-resmgr directory: relay dir (state/), fake sysfs, config; shared by both front ends."""
    path = Path(tempfile.mkdtemp(prefix="switch-", dir="/tmp"))
    build_sysfs(path / "sysfs", THIS_MACHINE)
    (path / "static.cfg").write_text(STATIC)
    yield path
    ctrd2.remove_all()
    shutil.rmtree(path, ignore_errors=True)


def relay(ctrd: Containerd, node_dir: Path) -> RelayProcess:
    return RelayProcess(node_dir, ctrd.socket, args=["--fallback-config", str(node_dir / "static.cfg"),
                                                     "--sysfs-root", str(node_dir / "sysfs")]).start()


def run_through(ctrd: Containerd, workdir: Path, endpoint: str, name: str, qos: str) -> str:
    pod_cfg = write_json(workdir / f"pod-{name}.json", make_pod_config(name, qos=qos))
    pod_id = ctrd.crictl("runp", pod_cfg, endpoint=endpoint).stdout.strip()
    cfg = write_json(workdir / f"ctr-{name}.json", make_container_config(name, **SHAPES[qos]))
    cid = ctrd.crictl("create", pod_id, cfg, pod_cfg, endpoint=endpoint).stdout.strip()
    ctrd.crictl("start", cid, endpoint=endpoint)
    return cid


def test_relay_to_nri_and_back_keeps_every_placement(ctrd2: Containerd, node_dir: Path) -> None:
    before = relay(ctrd2, node_dir)
    g = run_through(ctrd2, node_dir, before.endpoint, "g", "guaranteed")
    exclusive = ctrd2.cgroup_cpuset(g)
    assert exclusive in ("0", "1"), "the relay did not give the Guaranteed container a CPU of its own"
    before.stop()  # the keep-placement uninstall: nothing restores the cpuset
    assert ctrd2.cgroup_cpuset(g) == exclusive

    # Between the relay's stop and the plugin's start, kubelet runs containers on containerd: unplaced.
    be = run(ctrd2, node_dir, "be", "besteffort")
    assert ctrd2.cgroup_cpuset(be) == "0-1"

    plugin = Plugin(ctrd2, node_dir, STATIC).start()
    try:
        assert plugin.rm is not None
        # The relay's decision, from the cache the relay left in the same --relay-dir.
        assert format_cpuset(plugin.rm.policy.grants[g].exclusive) == exclusive == ctrd2.cgroup_cpuset(g)
        reserved = format_cpuset(plugin.rm.policy.reserved)
        assert eventually(lambda: ctrd2.cgroup_cpuset(be) == reserved)  # adopted and placed at Synchronize
    finally:
        plugin.stop()

    # NRI -> relay: the relay starts on the plugin's cache and keeps what the plugin decided.
    after = relay(ctrd2, node_dir)
    try:
        assert ctrd2.cgroup_cpuset(g) == exclusive
        assert ctrd2.cgroup_cpuset(be) == reserved
    finally:
        after.stop()
