"""Command line of cri-resmgr-installer."""

from __future__ import annotations

import argparse

from resmgr.cli_common import not_yet

DESCRIPTION = """\
cri-resmgr-installer runs privileged in the installer DaemonSet with the host
root mounted. It copies the cri-resmgr executable onto the node, writes the
cri-resource-manager.service systemd unit and its fallback/force/EXTRA_OPTIONS
configuration, repoints kubelet at the relay socket once the relay answers,
supervises it, and in uninstall mode reverses every change exactly.
"""


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="cri-resmgr-installer", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    return not_yet("cri-resmgr-installer", "the node installer")
