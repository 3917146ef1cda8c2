"""What cri-resmgr leaves unimported: every module loaded stays resident (bench-relay's and bench-nri's rss_mb)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import resmgr

# Standard-library modules the relay and the plugin used to load for one small use each (about 2.9 MB together):
# tempfile (with shutil, random, bz2, lzma) for the cache's file name, shutil again for argparse's terminal width,
# hashlib for SHA-256, decimal for memory quantities, difflib for "did you mean" in config errors.
UNNEEDED = ("tempfile", "shutil", "random", "bz2", "lzma", "hashlib", "decimal", "difflib")
# The relay's transport: the NRI plugin never serves CRI (about 1 MB).
RELAY_TRANSPORT = ("resmgr.relay.server", "resmgr.relay.splice", "resmgr.relay.interception")


def imported_after(code: str) -> set[str]:
    """The modules loaded in a fresh cri-resmgr interpreter (OpenSSL kept out, as resmgr.launch does) after ``code``."""
    script = ("import sys\nfrom resmgr.launch import keep_openssl_out\nkeep_openssl_out()\n" + code +
              "\nprint(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(resmgr.__file__).parent.parent).stdout
    return set(out.split())


def test_cri_resmgr_leaves_out_what_it_does_not_use() -> None:
    loaded = imported_after("import resmgr.cli\nresmgr.cli.build_parser().parse_args([])")
    assert loaded & {*UNNEEDED, *RELAY_TRANSPORT} == set()


def test_the_nri_front_end_leaves_out_the_relay_transport() -> None:
    loaded = imported_after("import resmgr.cli, resmgr.nri.frontend\nresmgr.cli.build_parser().parse_args(['--nri'])")
    assert loaded & {*UNNEEDED, *RELAY_TRANSPORT} == set()
