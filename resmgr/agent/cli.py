"""Command line of cri-resmgr-agent."""

from __future__ import annotations

import argparse

from resmgr.cli_common import not_yet

DESCRIPTION = """\
cri-resmgr-agent runs as a DaemonSet in the shoot. It watches the ConfigMaps
cri-resmgr-config.node.$NODE_NAME, cri-resmgr-config.group.$GROUP and
cri-resmgr-config.default in kube-system (in that order of precedence) plus
Adjustment custom resources, and pushes the winning configuration to the local
cri-resmgr over its unix-socket config API.
"""


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="cri-resmgr-agent", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    return not_yet("cri-resmgr-agent", "the configuration plane")
