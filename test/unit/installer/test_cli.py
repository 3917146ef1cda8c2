"""cri-resmgr-installer's command line: help, modes, probe."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import noderecord
from installer import failpoints
from installer.cli import MODE_ENV, build_parser, main, make_host, resolve_mode, run_uninstall
from installer.install import InstallSettings, NodeInstaller
from installer.readiness import probe, write_ready


def test_help_explains_modes_and_probe() -> None:
    out = subprocess.run([sys.executable, "-m", "installer.cli", "--help"], capture_output=True, text=True, check=True)
    for word in ("--mode", "uninstall", "probe", "--host-root", "--config-dir", "EXTRA_OPTIONS", "--ready-file",
                 "never", "SIGTERM", "--relay-timeout"):
        assert word in out.stdout


def test_mode_comes_from_flag_then_env_then_default() -> None:
    assert resolve_mode(None, {}) == "install"
    assert resolve_mode(None, {MODE_ENV: "uninstall"}) == "uninstall"
    assert resolve_mode("install", {MODE_ENV: "uninstall"}) == "install"
    with pytest.raises(ValueError, match=f"\\${MODE_ENV}='remove' is not a mode"):
        resolve_mode(None, {MODE_ENV: "remove"})


def test_bad_arguments_fail_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mode", "nuke", "--host-root", str(tmp_path)]) == 2
    assert "--mode='nuke' is not a mode" in capsys.readouterr().err
    assert main(["--binary", str(tmp_path / "missing"), "--host-root", str(tmp_path)]) == 2
    assert "is neither an executable nor a directory with cri-resmgr at its top" in capsys.readouterr().err
    assert main(["--mode", "uninstall", "--host-root", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["--mode", "uninstall", "--host-root", str(tmp_path), "--host-namespaces", "mount,bogus"]) == 2
    assert "unknown namespace 'bogus'" in capsys.readouterr().err


def test_probe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ready = tmp_path / "ready"
    assert main(["probe", "--ready-file", str(ready)]) == 1
    assert "does not exist yet" in capsys.readouterr().out
    write_ready(ready, False, "install failed: relay silent", "install")
    assert main(["--probe", "--ready-file", str(ready)]) == 1
    assert capsys.readouterr().out.strip() == "not ready (install): install failed: relay silent"
    write_ready(ready, True, "installed", "install")
    assert main(["probe", "--ready-file", str(ready)]) == 0
    doc = json.loads(ready.read_text())
    assert probe(ready, max_age_s=60, now=doc["ts"] + 61)[1].startswith("not ready: the installer has not reported")
    ready.write_text("{broken")
    assert not probe(ready)[0]
    assert time.time() >= doc["ts"]


def test_uninstall_on_a_clean_node_logs_json_and_reports_ready(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    r = subprocess.run([sys.executable, "-m", "installer.cli", "--host-root", str(tmp_path), "--ready-file", str(ready),
                        "--once"], capture_output=True, text=True, env={MODE_ENV: "uninstall", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    assert {"ts", "level", "logger", "msg"} <= set(lines[0])
    assert any(entry["msg"] == "no installer state on the node: nothing to uninstall" for entry in lines)
    assert probe(ready) == (True, "ready (uninstall): uninstalled: the node is clean")


def test_uninstall_records_its_failure_and_then_its_success(tmp_path: Path) -> None:
    """The node record follows the uninstall: failed with the reason, then uninstalled (the failure is a
    node-file failpoint on a node without installer state)."""
    args = build_parser().parse_args(["--mode", "uninstall", "--host-root", str(tmp_path), "--once",
                                      "--ready-file", str(tmp_path / "ready")])
    installer = NodeInstaller(make_host(args), InstallSettings(binary=tmp_path / "unused"))
    failpoint = tmp_path / failpoints.NODE_FAILPOINT_DIR.lstrip("/") / "uninstall-start"
    failpoint.parent.mkdir(parents=True)
    failpoint.write_text("fail injected\n")
    records: list[tuple[str, str]] = []
    assert run_uninstall(installer, args, threading.Event(), lambda s, r: records.append((s, r))) == 1
    assert records == [(noderecord.UNINSTALL_FAILED, "uninstall failed: failpoint uninstall-start: injected")]
    failpoint.unlink()
    assert run_uninstall(installer, args, threading.Event(), lambda s, r: records.append((s, r))) == 0
    assert records[-1] == (noderecord.UNINSTALLED, "")


class _FailingInstaller:
    """An install that fails before it touched kubelet (a relay that cannot start)."""

    def __init__(self, journal: dict[str, str]) -> None:
        self._journal = journal

    def install(self, config: object) -> None:
        raise RuntimeError("the relay did not answer CRI Version within 60s")

    def journal(self) -> dict[str, str]:
        return self._journal


def test_a_failed_install_leaves_the_node_usable_and_says_so_in_the_record(tmp_path: Path) -> None:
    """Node-critical semantics: kubelet still on containerd, so the pod is ready (the node takes workloads)
    while the node record says install-failed; kubelet left on a relay that failed is not usable."""
    from installer.cli import run_install

    args = build_parser().parse_args(["--host-root", str(tmp_path), "--once", "--ready-file", str(tmp_path / "ready"),
                                      "--config-dir", str(tmp_path / "config")])
    records: list[tuple[str, str]] = []
    assert run_install(_FailingInstaller({}), args, threading.Event(), lambda s, r: records.append((s, r))) == 1
    ready, why = probe(tmp_path / "ready")
    assert ready and "kubelet stays on the container runtime" in why, why
    assert records == [(noderecord.INSTALL_FAILED, "install failed: the relay did not answer CRI Version within 60s")]
    assert run_install(_FailingInstaller({"kubelet_target": "relay"}), args, threading.Event(),
                       lambda s, r: records.append((s, r))) == 1
    assert not probe(tmp_path / "ready")[0]
