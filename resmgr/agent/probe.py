"""Command line of cri-resmgr-agent-probe."""

from __future__ import annotations

import argparse

from resmgr.cli_common import not_yet

DESCRIPTION = """\
cri-resmgr-agent-probe asks the local cri-resmgr-agent for its health and exits
0 when healthy or 1 with a one-line reason otherwise. The agent DaemonSet uses
it as its readiness probe with '-query config-status'.
"""


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="cri-resmgr-agent-probe", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    return not_yet("cri-resmgr-agent-probe", "the configuration plane")
