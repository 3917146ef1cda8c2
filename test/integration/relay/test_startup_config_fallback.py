"""A bad config never kills the relay (issue 16 item 2): the real cri-resmgr started with a --fallback-config or
--force-config that fails the schema, cannot be read, or is valid but does not fit this node's CPUs serves
kubelet anyway, with the next config by precedence (here the defaults: policy none), and says why in its log
and in cri_resmgr_config_errors_total. (The node annotation: test/integration/agent/test_config_sources_real.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.relay_process import RelayProcess, metric_value

from devland.waiting import eventually

pytestmark = pytest.mark.integration

# Passes the schema; no node of this test suite has 201 CPUs, so the static policy refuses it.
UNFIT = "policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:0-200\n"
BAD_DUMP_RULE = "dump:\n  Config: 'loud:.*'\n"


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix="relay-cfg-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def started(workdir: Path, containerd, *args: str) -> RelayProcess:
    return RelayProcess(workdir, containerd.socket, args=list(args)).start()


def errors_logged(relay: RelayProcess) -> list[dict]:
    return [e for e in relay.log_entries() if e.get("level") in ("ERROR", "error") and "not used" in e["msg"]]


@pytest.mark.parametrize(("flag", "text", "words"), [
    ("--fallback-config", UNFIT, "policy.AvailableResources.cpu"),
    ("--fallback-config", BAD_DUMP_RULE, "dump.Config"),
    ("--force-config", UNFIT, "policy.AvailableResources.cpu"),
    ("--force-config", None, "cannot read config file"),
])
def test_the_relay_serves_with_the_defaults_and_says_why(containerd, workdir, tmp_path, flag, text, words):
    config = workdir / "bad.cfg"
    if text is not None:
        config.write_text(text)
    relay = started(workdir, containerd, flag, str(config))
    try:
        source = flag.lstrip("-")
        [entry] = errors_logged(relay)
        assert entry["msg"].startswith(f"{source} {config} not used: ") and words in entry["msg"]
        assert entry["msg"].endswith("running with the config from defaults")
        metrics = relay.metrics_text()
        assert metric_value(metrics, f'cri_resmgr_config_errors_total{{source="{source}"}}') == 1
        # kubelet's runtime works: a container runs through the relay, unpinned (policy none).
        ep = relay.endpoint
        pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("cfg-fallback"))
        pod_id = containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
        cid = containerd.crictl("create", pod_id, write_json(tmp_path / "c.json", make_container_config("c")),
                                pod_cfg, endpoint=ep).stdout.strip()
        containerd.crictl("start", cid, endpoint=ep)
        assert any(e.get("msg", "").startswith("starting cri-resmgr") and e.get("policy") == "none"
                   for e in relay.log_entries())
    finally:
        relay.stop()
        containerd.remove_all()


def test_a_fixed_force_config_is_taken_on_sighup(containerd, workdir):
    config = workdir / "force.cfg"
    config.write_text(UNFIT)
    relay = started(workdir, containerd, "--force-config", str(config))
    try:
        assert errors_logged(relay)
        # The relay runs policy none now; another policy takes a restart (or the live policy switch).
        config.write_text("policy:\n  Active: none\nlogger:\n  Debug: relay\n")
        relay.signal(signal.SIGHUP)
        assert eventually(lambda: any(e["msg"] == "SIGHUP: reloaded forced config" for e in relay.log_entries()),
                          60), "the fixed file is active"
        # A file broken again on SIGHUP keeps the good one and is counted too.
        config.write_text(UNFIT)
        relay.signal(signal.SIGHUP)
        assert eventually(lambda: metric_value(relay.metrics_text(),
                                               'cri_resmgr_config_errors_total{source="force-config"}') == 2,
                          60), "the second refusal is counted"
        assert relay.proc is not None and relay.proc.alive()
    finally:
        relay.stop()


def test_force_config_signal_flag(containerd, workdir):
    """--force-config-signal (upstream's flag, also from EXTRA_OPTIONS) picks the reload signal."""
    config = workdir / "force.cfg"
    config.write_text("policy:\n  Active: none\n")
    relay = started(workdir, containerd, "--force-config", str(config), "--force-config-signal", "SIGUSR1")
    try:
        config.write_text("policy:\n  Active: none\nlogger:\n  Debug: relay\n")
        os.kill(relay.pid, signal.SIGUSR1)
        assert eventually(lambda: any(e["msg"] == "SIGUSR1: reloaded forced config" for e in relay.log_entries()),
                          60), "SIGUSR1 reloads"
        assert relay.proc is not None and relay.proc.alive()
    finally:
        relay.stop()
