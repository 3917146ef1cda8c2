"""Command line of gardener-extension-cri-resmgr."""

from __future__ import annotations

import argparse

from resmgr.cli_common import not_yet

DESCRIPTION = """\
gardener-extension-cri-resmgr is a kopf operator for the seed cluster. It reacts
to Extension resources of type cri-resmgr-extension, merges the operator's base
configs with the shoot's providerConfig, validates them, renders the internal
installation chart with helm and deploys it to the shoot as a ManagedResource.
It reports health and reverses everything when the extension is disabled.
"""


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="gardener-extension-cri-resmgr", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    return not_yet("gardener-extension-cri-resmgr", "the extension controller")
