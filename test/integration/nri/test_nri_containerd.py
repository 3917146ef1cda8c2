"""cri-resmgr as an NRI plugin of a real containerd 2: placements land in the host's cgroups without a relay.

crictl talks to containerd's own socket; containerd calls our plugin over its private NRI socket. The
resource manager decides on a fake sysfs tree of this machine's shape (2 CPUs), as in the policy tests.
Every policy's placements through NRI are in test/integration/policy (each policy's scenario parametrized
over both front ends); here are the plugin's own ways: restarts, the real program, a switch of front ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.containerd import Containerd
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.placement import NRI, SHAPES, Node
from fixtures.sysfs_builder import THIS_MACHINE, build_sysfs
from integration.relay.relay_process import RelayProcess

import resmgr
from devland.procs import Process, unix_socket_answers
from devland.waiting import eventually
from resmgr.topology import format_cpuset

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"


@pytest.fixture(scope="module")
def ctrd2(nri_containerd: Containerd) -> Containerd:
    return nri_containerd


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


def test_plugin_restart_resynchronizes_from_synchronize_and_its_cache(ctrd2: Containerd, workdir: Path) -> None:
    plugin = Node(ctrd2, workdir, STATIC, frontend=NRI).start()
    g = run(ctrd2, workdir, "g", "guaranteed")
    assert plugin.rm is not None
    exclusive = format_cpuset(plugin.rm.policy.grants[g].exclusive)
    reserved = format_cpuset(plugin.rm.policy.reserved)
    assert ctrd2.cgroup_cpuset(g) == exclusive
    plugin.stop()
    # While no plugin runs, a container is made that nobody placed: it gets every CPU.
    be = run(ctrd2, workdir, "be", "besteffort")
    assert ctrd2.cgroup_cpuset(be) == "0-1"
    again = Node(ctrd2, workdir, STATIC, frontend=NRI).start()
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
    plugin = Node(ctrd2, workdir, STATIC, frontend=NRI).start()
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

    plugin = Node(ctrd2, node_dir, STATIC, frontend=NRI).start()
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
