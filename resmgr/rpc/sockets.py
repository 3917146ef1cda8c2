"""Unix socket endpoints: parsing CRI endpoint strings, and taking over a socket path safely."""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat

log = logging.getLogger("resmgr.sockets")


class SocketInUse(RuntimeError):
    """The socket path cannot be taken over; the message says why and what to do."""


def endpoint_target(endpoint: str) -> str:
    """Accept ``/path``, ``unix:/path`` or ``unix:///path``; return the ``unix://`` target form."""
    if endpoint.startswith("unix:"):
        path = endpoint[len("unix:"):]
        path = path[2:] if path.startswith("//") else path
    elif endpoint.startswith("/"):
        path = endpoint
    else:
        raise ValueError(f"unsupported CRI endpoint {endpoint!r}; give a unix socket path or unix:///path")
    if not path.startswith("/"):
        raise ValueError(f"CRI endpoint {endpoint!r} must be an absolute unix socket path")
    return "unix://" + path


def endpoint_path(endpoint: str) -> str:
    """The filesystem path of a unix endpoint (``unix:///run/x.sock`` -> ``/run/x.sock``)."""
    return endpoint_target(endpoint)[len("unix://"):]


def remove_stale_socket(path: str) -> None:
    """Remove a socket left by a previous run; refuse to touch a live server or a non-socket file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"socket path {path} exists and is not a socket; refusing to remove it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            log.warning("socket probe failed: %s; treating it as stale", err, extra={"socket": path})
    else:
        raise SocketInUse(f"another process is serving on {path}; stop it first")
    finally:
        probe.close()
    log.info("removing stale socket", extra={"socket": path})
    os.unlink(path)
