"""The installer's nri and auto modes below the landscape: containerd's NRI state read off the node, the node made
ready for the NRI plugin's pod, the plugin waited for before the relay or an uninstall takes over, the frontend
label, and the run loop's records (installer/nri_state.py, installer/install.py, installer/node_label.py,
installer/cli.py run_nri)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import noderecord
from installer import install as install_mod
from installer.cli import build_parser, run_nri
from installer.host import Host
from installer.install import FRONTEND, NRI_FRONTEND, InstallError, InstallSettings, NodeInstaller
from installer.journal import Journal
from installer.node_label import FRONTEND_LABEL, NodeLabeler
from installer.nri_state import HOW_TO_TURN_ON, nri_state
from installer.readiness import probe
from installer.static_config import StaticConfig
from resmgr.options import AGENT_DIR_CONFIG_SOCKET, AGENT_SOCKET_DIR, AGENT_SOCKET_GROUP, DEFAULT_NRI_SOCKET


class FakeSystemd:
    """systemctl on a node without the relay's unit (and, unless told, without kubelet's)."""

    def __init__(self, active: str = "inactive") -> None:
        self.active = active
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        out = ""
        if argv[:2] == ["systemctl", "show"]:
            props = [a.split("=", 1)[1] for a in argv if a.startswith("--property=")]
            known = {"ActiveState": self.active, "LoadState": "not-found", "UnitFileState": ""}
            out = "".join(f"{p}={known.get(p, '')}\n" for p in props)
        return subprocess.CompletedProcess(list(argv), 0, out, "")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short root: the sockets bound under it must fit AF_UNIX's 108 bytes (pytest's own tmp_path does not)."""
    root = Path(tempfile.mkdtemp(prefix="nri", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def node(tmp_path: Path, active: str = "inactive") -> Host:
    return Host(tmp_path, FakeSystemd(active))  # type: ignore[arg-type]


@contextmanager
def listening(host: Host, node_path: str) -> Iterator[None]:
    path = host.path(node_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen(4)
        try:
            yield
        finally:
            path.unlink()


# ----- containerd's NRI state -----------------------------------------------------------------


def test_nri_is_on_where_containerd_serves_its_socket(tmp_path: Path) -> None:
    host = node(tmp_path)
    off = nri_state(host)
    assert not off.enabled
    assert "no [plugins.\"io.containerd.nri.v1.nri\"] section" in off.reason and HOW_TO_TURN_ON in off.reason
    with listening(host, DEFAULT_NRI_SOCKET):
        assert nri_state(host).enabled and nri_state(host).reason == ""


def test_a_disabled_nri_plugin_or_another_socket_path_is_named(tmp_path: Path) -> None:
    host = node(tmp_path)
    conf = tmp_path / "etc/containerd/config.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('version = 3\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n')
    state = nri_state(host)
    assert not state.enabled and "sets disable = true" in state.reason and "disable = false" in state.reason
    conf.write_text('version = 3\n[plugins."io.containerd.nri.v1.nri"]\n  socket_path = "/run/x/nri.sock"\n')
    with listening(host, "/run/x/nri.sock"):
        state = nri_state(host)
    assert not state.enabled and "configured at /run/x/nri.sock" in state.reason
    conf.write_text("not = [toml")
    assert not nri_state(host).enabled  # unreadable config: judged by the socket alone
    with listening(host, DEFAULT_NRI_SOCKET):
        assert nri_state(host).enabled


# ----- the node made ready for the plugin -----------------------------------------------------


def test_a_clean_node_gets_the_plugins_directories_once(tmp_path: Path) -> None:
    host = node(tmp_path)
    installer = NodeInstaller(host, InstallSettings(binary=tmp_path / "unused"))
    assert installer.switch_to_nri() == [AGENT_SOCKET_DIR]
    agent_dir = host.path(AGENT_SOCKET_DIR).stat()
    assert (agent_dir.st_gid, agent_dir.st_mode & 0o7777) == (AGENT_SOCKET_GROUP, 0o2770)
    assert host.path("/var/lib/cri-resmgr").stat().st_mode & 0o777 == 0o700
    assert Journal.load(host).get(FRONTEND) == NRI_FRONTEND
    assert installer.switch_to_nri() == []  # idempotent


def test_a_relay_node_is_uninstalled_keeping_its_placements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = node(tmp_path)
    journal = Journal.load(host)
    journal.set(FRONTEND, "relay")  # a relay node (journals of earlier versions have no frontend: the same)
    calls: list[bool] = []

    def uninstall(self: NodeInstaller, keep_placement: bool = False) -> list[str]:
        calls.append(keep_placement)
        Journal.load(self.host).clear()
        return ["/etc/systemd/system/cri-resource-manager.service"]

    monkeypatch.setattr(NodeInstaller, "uninstall", uninstall)
    installer = NodeInstaller(host, InstallSettings(binary=tmp_path / "unused"))
    assert installer.switch_to_nri()[0] == "/etc/systemd/system/cri-resource-manager.service"
    assert calls == [True]
    assert installer.switch_to_nri() == [] and calls == [True]  # NRI now: no second uninstall


def test_nri_relay_nri_keeps_the_plugins_directories_and_cache(tmp_path: Path) -> None:
    """A node that was in NRI mode before the relay: the journal recorded the plugin's directories, which hold the
    cache and the agent's sockets by the time the node switches back. The relay's real uninstall for NRI keeps them
    (recorded, for the NRI uninstall). Before: "refusing to drop the journal", retried forever (the landscape)."""
    host = node(tmp_path)
    installer = NodeInstaller(host, InstallSettings(binary=tmp_path / "unused"))
    installer.switch_to_nri()
    recorded = set(Journal.load(host).dirs)
    assert {"/var/lib/cri-resmgr", AGENT_SOCKET_DIR} <= recorded
    host.path("/var/lib/cri-resmgr/cache").write_text("placements")  # the plugin's, then the relay's cache
    host.path(f"{AGENT_SOCKET_DIR}/cri-resmgr-agent.sock").write_text("")
    journal = Journal.load(host)
    journal.set(FRONTEND, "relay")  # the relay installed over it (same journal)
    journal.ensure_dir("/opt/cri-resmgr/bin")  # and a directory of the relay's own
    assert installer.switch_to_nri() == []
    after = Journal.load(host)
    assert after.get(FRONTEND) == NRI_FRONTEND and set(after.dirs) == recorded
    assert host.path("/var/lib/cri-resmgr/cache").read_text() == "placements"
    assert not host.exists("/opt/cri-resmgr")


def test_the_relay_waits_for_the_plugin_to_stop(tmp_path: Path) -> None:
    host = node(tmp_path)
    installer = NodeInstaller(host, InstallSettings(binary=tmp_path / "unused"))
    installer.switch_to_nri()
    assert not installer.nri_plugin_serves()
    with listening(host, AGENT_DIR_CONFIG_SOCKET):
        assert installer.nri_plugin_serves()
        with pytest.raises(InstallError, match="NRI plugin still serves on this node; waiting for its pod"):
            installer.install(StaticConfig())
        # The relay's own unit serving the same socket is not the plugin.
        assert not NodeInstaller(node(tmp_path, "active"), installer.settings).nri_plugin_serves()


def test_uninstall_in_nri_mode_restores_cpusets_once_the_plugin_is_gone(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    host = node(tmp_path)
    installer = NodeInstaller(host, InstallSettings(binary=tmp_path / "unused"))
    installer.switch_to_nri()
    host.path("/var/lib/cri-resmgr/cache").write_text("{}")
    restored: list[str] = []
    monkeypatch.setattr(install_mod, "restore_cpusets", lambda h, endpoint: restored.append(endpoint) or 3)
    monkeypatch.setattr(NodeInstaller, "_kubelet_file_endpoint",
                        lambda self: "unix:///run/containerd/containerd.sock")
    with listening(host, AGENT_DIR_CONFIG_SOCKET):
        with pytest.raises(InstallError, match="before giving the containers kubelet's cpusets back"):
            installer.uninstall()
    assert restored == [] and host.exists("/var/lib/cri-resmgr/cache")
    installer.uninstall()
    assert restored == ["unix:///run/containerd/containerd.sock"]
    assert not host.exists("/var/lib/cri-resmgr") and not host.exists(AGENT_SOCKET_DIR)
    assert not Journal.load(host).exists


# ----- the frontend label ----------------------------------------------------------------------


class FakeCoreApi:
    def __init__(self, labels: dict[str, str] | None = None, fail_read: bool = False) -> None:
        self.labels = dict(labels or {})
        self.patches: list[dict[str, Any]] = []
        self.fail_read = fail_read

    def read_node(self, name: str) -> Any:
        if self.fail_read:
            raise OSError("connection refused")
        return SimpleNamespace(metadata=SimpleNamespace(labels=dict(self.labels)))

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.patches.append(body)
        for key, value in body["metadata"]["labels"].items():
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value


def test_the_label_is_patched_only_when_it_changes() -> None:
    api = FakeCoreApi({"kubernetes.io/hostname": "n1"})
    labeler = NodeLabeler(api, "n1")
    assert labeler.ensure("nri") and not labeler.ensure("nri")
    assert api.patches == [{"metadata": {"labels": {FRONTEND_LABEL: "nri"}}}]
    labeler.leave_nri()  # a relay install: the stale nri label goes before the relay starts
    assert api.labels[FRONTEND_LABEL] == "relay"
    assert labeler.ensure(None) and FRONTEND_LABEL not in api.labels
    reads = []
    api.read_node = lambda name: reads.append(name)  # type: ignore[method-assign]
    assert not labeler.ensure(None) and reads == []  # known: no API call every check interval
    NodeLabeler(FakeCoreApi(fail_read=True), "n1").leave_nri()  # unreadable: the install goes on


# ----- the run loop ------------------------------------------------------------------------------


class FakeInstaller:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.switched = 0
        self.installed = 0

    def switch_to_nri(self) -> list[str]:
        self.switched += 1
        return []

    def journal(self) -> dict[str, str]:
        return {}

    def install(self, config: object) -> Any:
        self.installed += 1
        return SimpleNamespace(kubelet_layout="extra_args", runtime_endpoint="unix:///run/containerd/containerd.sock")


def run(tmp_path: Path, auto: bool = False, labels: dict[str, str] | None = None,
        ) -> tuple[int, list[tuple[str, str]], FakeCoreApi, FakeInstaller]:
    args = build_parser().parse_args(["--host-root", str(tmp_path), "--once", "--ready-file", str(tmp_path / "ready"),
                                      "--config-dir", str(tmp_path / "config")])
    records: list[tuple[str, str]] = []
    api = FakeCoreApi({FRONTEND_LABEL: "nri"} if labels is None else labels)
    installer = FakeInstaller(node(tmp_path))
    rc = run_nri(installer, args, threading.Event(), lambda s, r: records.append((s, r)), NodeLabeler(api, "n1"),
                 auto=auto)  # type: ignore[arg-type]
    return rc, records, api, installer


def test_mode_nri_without_nri_says_so_and_does_not_fall_back(tmp_path: Path) -> None:
    rc, records, api, installer = run(tmp_path)
    assert rc == 1 and installer.installed == 0 and installer.switched == 1
    [(state, reason)] = records
    assert state == noderecord.NRI_UNAVAILABLE and reason.startswith("containerd's NRI is off on this node")
    assert FRONTEND_LABEL not in api.labels  # no plugin pod on a node without NRI
    ready, why = probe(tmp_path / "ready")
    assert ready and "NRI is off" in why  # kubelet on containerd: the node is usable, so not tainted


def test_mode_nri_with_nri_labels_the_node_for_the_plugin(tmp_path: Path) -> None:
    with listening(node(tmp_path), DEFAULT_NRI_SOCKET):
        rc, records, api, _ = run(tmp_path)
        assert rc == 0 and records == [(noderecord.INSTALLED, "")] and api.labels[FRONTEND_LABEL] == "nri"
        # auto with NRI on is NRI mode.
        rc, records, api, installer = run(tmp_path, auto=True)
        assert rc == 0 and records == [(noderecord.INSTALLED, "")] and installer.installed == 0


def test_mode_auto_without_nri_installs_the_relay_and_says_why(tmp_path: Path) -> None:
    rc, records, api, installer = run(tmp_path, auto=True)
    assert rc == 0 and installer.installed == 1 and installer.switched == 0
    [(state, reason)] = records
    assert state == noderecord.INSTALLED and reason.startswith(noderecord.AUTO_RELAY_PREFIX + "containerd's NRI is off")
    assert api.labels[FRONTEND_LABEL] == "relay"  # the stale nri label is gone before the relay starts
    assert os.path.exists(tmp_path / "ready")
    assert run(tmp_path, auto=True, labels={})[2].labels == {FRONTEND_LABEL: "relay"}  # says what auto chose
