"""Fixtures for installer tests: a systemd node with containerd and a kubelet layout, plus installer inputs."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from integration.installer.installer_node import (
    KubeletLayout,
    installer_argv,
    node_ro_binds,
    prepare_node,
    run_installer,
    write_launcher,
)

# The relay's metrics port would collide between parallel nodes (they share the host network).
DEFAULT_EXTRA_OPTIONS = "--metrics-address=off\n"


@dataclass
class InstallerNode:
    node: object
    layout: KubeletLayout
    binary: Path
    config_dir: Path
    ready_file: Path
    runs: list[subprocess.CompletedProcess] = field(default_factory=list)

    def set_config(self, **keys: str | None) -> None:
        for key, value in keys.items():
            path = self.config_dir / key.replace("_cfg", ".cfg")
            if value is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(value)

    def install(self, *extra: str, env: dict[str, str] | None = None, expect_rc: int | None = 0):
        r = run_installer(self.node, self.binary, self.config_dir, self.ready_file, *extra, env=env)
        self.runs.append(r)
        if expect_rc is not None:
            assert r.returncode == expect_rc, \
                f"installer exited {r.returncode}:\n{r.stderr[-4000:]}\n{self.relay_unit_report()}"
        return r

    def relay_unit_report(self) -> str:
        """The relay unit's state and journal on the node: why systemd refused or stopped it (start limit, a
        failed ExecStartPre, the relay's own exit), which the installer's log does not say."""
        unit = "cri-resource-manager.service"
        status = self.node.run(["systemctl", "status", "--no-pager", "-n", "0", unit], check=False)
        journal = self.node.run(["journalctl", "--no-pager", "-n", "60", "-u", unit], check=False)
        return f"--- systemctl status {unit}:\n{status.stdout[-2000:]}\n--- its journal:\n{journal.stdout[-6000:]}"

    def uninstall(self, expect_rc: int | None = 0):
        return self.install("--mode", "uninstall", expect_rc=expect_rc)

    def supervise_argv(self, *extra: str) -> list[str]:
        return installer_argv(self.node, self.binary, self.config_dir, self.ready_file, *extra)


@pytest.fixture
def installer_node(systemd_node_factory, tmp_path: Path) -> Callable[[str], InstallerNode]:
    def make(layout: str) -> InstallerNode:
        node = systemd_node_factory(ro_binds=node_ro_binds())
        spec = prepare_node(node, layout)
        config_dir = tmp_path / f"config-{layout}"
        config_dir.mkdir()
        (config_dir / "EXTRA_OPTIONS").write_text(DEFAULT_EXTRA_OPTIONS)
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        return InstallerNode(node, spec, write_launcher(bindir), config_dir, tmp_path / f"ready-{layout}")
    return make
