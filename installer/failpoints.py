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

ENV = "CRI_RESMGR_INSTALLER_FAILPOINT"

# In the order install reaches them. "file-journaled" fires between recording a file change
# (with its backup) and writing the file, the narrowest window of the journal protocol.
INSTALL_FAILPOINTS = (
    "file-journaled",
    "binary-installed",
    "unit-files-written",
    "static-config-written",
    "unit-started",
    "relay-answered",
    "kubelet-files-written",
    "kubelet-restarted",
    "install-verified",
)

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
