"""Does a CRI endpoint on the node answer? One CRI ``Version`` call over its unix socket."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from installer.host import Host
from resmgr.sockets import endpoint_path

log = logging.getLogger("installer.cri_check")


class CriUnavailable(RuntimeError):
    """The endpoint did not answer CRI Version; str() says why."""


def normalize_endpoint(host: Host, endpoint: str) -> str:
    """Canonical node path of an endpoint, so /var/run/x and /run/x compare equal."""
    path = endpoint_path(endpoint)
    real = host.path(path)
    try:
        return "/" + str(real.relative_to(host.root))
    except ValueError:
        return path


def cri_version(host: Host, endpoint: str, timeout: float = 2.0) -> str:
    """Call CRI Version on a node endpoint; returns "name version" or raises CriUnavailable."""
    sock = host.path(endpoint_path(endpoint))
    if not sock.exists():
        raise CriUnavailable(f"socket {endpoint_path(endpoint)} does not exist")
    try:
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            stub = api_pb2_grpc.RuntimeServiceStub(channel)
            resp = stub.Version(api_pb2.VersionRequest(version="v1"), timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        raise CriUnavailable(f"CRI Version on {endpoint} failed: {code.name if code else '?'}: {detail}") from exc
    return f"{resp.runtime_name} {resp.runtime_version}"


def wait_cri(host: Host, endpoint: str, timeout: float, interval: float = 0.3,
             give_up: Callable[[], str | None] = lambda: None) -> str:
    """Poll CRI Version until it answers or ``timeout`` passes (then CriUnavailable with the last error).

    ``give_up`` is asked between attempts; a non-empty answer (say, "the unit has exited") ends
    the wait early with that reason.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cri_version(host, endpoint)
        except CriUnavailable as exc:
            if time.monotonic() >= deadline:
                raise CriUnavailable(f"{endpoint} did not answer CRI Version within {timeout:g}s: {exc}") from exc
            reason = give_up()
            if reason:
                raise CriUnavailable(f"{endpoint} did not answer CRI Version: {reason}") from exc
        time.sleep(interval)
