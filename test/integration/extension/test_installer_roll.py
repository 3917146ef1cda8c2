"""How many nodes the installer DaemonSets roll at once: install one node at a time, uninstall
(disable, and the cleanup DaemonSet for nodes outside the selection) installer.uninstallMaxUnavailable,
default 50% (docs/operations/node-safety.md: 100 nodes in about two per-node uninstall times)."""

from __future__ import annotations

import pytest
from integration.extension.test_extension_charts import INSTALL_VALUES
from integration.extension.test_installer_selection import daemonsets


def max_unavailable(ds: dict):
    return ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]


@pytest.mark.parametrize("configured, want", [(None, "50%"), (10, 10), ("20%", "20%")])
def test_uninstall_rolls_configured_nodes_at_once_and_install_one(tools, configured, want):
    installer = dict(INSTALL_VALUES.get("installer") or {})
    if configured is not None:
        installer["uninstallMaxUnavailable"] = configured
    selected = daemonsets(tools, {**INSTALL_VALUES, "installer": {**installer, "mode": "install"},
                                  "workerPools": ["a"]})
    assert max_unavailable(selected["cri-resmgr-installer"]) == 1
    assert max_unavailable(selected["cri-resmgr-installer-cleanup"]) == want
    disabled = daemonsets(tools, {**INSTALL_VALUES, "installer": {**installer, "mode": "uninstall"}})
    assert max_unavailable(disabled["cri-resmgr-installer"]) == want
