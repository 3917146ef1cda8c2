"""Command line of cri-resmgr."""

from __future__ import annotations

import argparse

from resmgr import __version__
from resmgr.cli_common import not_yet

DESCRIPTION = """\
cri-resmgr relays the Container Runtime Interface (CRI) between kubelet and the
container runtime (containerd). Kubelet talks to the relay socket; every call is
forwarded to the runtime, and calls that create, update or remove pods and
containers pass through a resource manager that places containers on CPUs and
memory nodes according to the active policy (none, static, topology-aware,
balloons). Configuration uses cri-resource-manager's YAML format.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cri-resmgr", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"cri-resmgr {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(argv)
    return not_yet("cri-resmgr", "the CRI relay")
