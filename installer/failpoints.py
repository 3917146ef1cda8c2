"""Named crash points, so tests can kill the installer at every step and check that a re-run converges.

Set ``CRI_RESMGR_INSTALLER_FAILPOINT=<name>`` and the process SIGKILLs itself when it reaches
that point: no cleanup, no finally blocks, exactly like a node reboot or an OOM kill.
The names are listed in :data:`INSTALL_FAILPOINTS` and :data:`UNINSTALL_FAILPOINTS`; nothing
happens when the variable is unset.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

ENV = "CRI_RESMGR_INSTALLER_FAILPOINT"

# In the order install reaches them. "release-verified" fires between the verified copy of a release and
# its rename into place. "file-journaled" fires between recording a file change
# (with its backup) and writing the file, the narrowest window of the journal protocol.
INSTALL_FAILPOINTS = (
    "release-verified",
    "release-copied",
    "binary-installed",
    "file-journaled",
    "unit-files-written",
    "static-config-written",
    "unit-started",
    "relay-answered",
    "kubelet-files-written",
    "kubelet-restarted",
    "install-verified",
)

# Reached only on a node installed by the one-file version: its executable has become a release, the
# stable path is not yet the symlink to it.
MIGRATION_FAILPOINTS = ("one-file-adopted",)

UNINSTALL_FAILPOINTS = (
    "uninstall-kubelet-restored",
    "uninstall-unit-stopped",
    "uninstall-state-reset",
    "uninstall-files-removed",
)

log = logging.getLogger("installer.failpoints")


def hit(name: str) -> None:
    if os.environ.get(ENV) == name:
        log.warning("failpoint %s reached: killing the installer", name, extra={"failpoint": name})
        os.kill(os.getpid(), signal.SIGKILL)


# Node-file failpoints: one node of a DaemonSet (whose environment is the same everywhere) can be made
# slow or failing by a file on that node: /etc/cri-resmgr-installer/failpoints/<name> holding
# "sleep <seconds>" or "fail <message>". Tests use them to prove that the extension waits for that node.
NODE_FAILPOINT_DIR = "/etc/cri-resmgr-installer/failpoints"
NODE_FAILPOINTS = ("uninstall-start",)


class NodeFailpointError(RuntimeError):
    """A node-file failpoint asked this step to fail."""


def hit_node(host: Any, name: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """Act on the node-file failpoint ``name`` if its file exists on ``host`` (an installer.host.Host)."""
    raw = host.read_if_exists(f"{NODE_FAILPOINT_DIR}/{name}")
    if raw is None:
        return
    verb, _, arg = raw.decode(errors="replace").strip().partition(" ")
    if verb == "sleep":
        log.warning("node failpoint %s: sleeping %s s", name, arg, extra={"failpoint": name})
        sleep(float(arg or 0))
    elif verb == "fail":
        log.warning("node failpoint %s: failing", name, extra={"failpoint": name})
        raise NodeFailpointError(f"failpoint {name}: {arg or 'failed on purpose'}")
    else:
        log.warning("node failpoint %s: unknown action %r ignored (use 'sleep S' or 'fail MSG')", name, verb)
