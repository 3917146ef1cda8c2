"""The ``cri-resmgr`` executable's entry point: keeps OpenSSL out of the relay, then runs resmgr.cli.

cri-resmgr talks only over unix sockets and plain loopback HTTP; it never speaks TLS and
hashes with SHA-256 alone. Still, asyncio imports ``ssl`` and hashlib imports ``_hashlib``
whenever they can, and both map OpenSSL: 4.5 MB of the relay's resident memory
(``import resmgr.cli``: 35.3 MB with them, 30.8 MB without). Marked absent before anything
imports them, asyncio takes its no-TLS path and hashlib its built-in SHA-256, as on a Python
built without OpenSSL. Only this process is affected: the agent, the webhook and everything
else that imports resmgr keep ssl.
"""

from __future__ import annotations

import sys

# The modules that load OpenSSL's libraries (libssl, libcrypto).
OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")


def keep_openssl_out() -> None:
    """Make later ``import ssl`` / ``import _hashlib`` fail with ImportError (a no-op once they are loaded)."""
    for name in OPENSSL_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "known to be absent"


def main() -> int | None:
    keep_openssl_out()
    from resmgr.cli import main as run

    return run()
