"""Does a CRI endpoint on the node answer? One CRI ``Version`` call over its unix socket."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from installer.host import Host
from resmgr.rpc.sockets import endpoint_path

log = logging.getLogger("installer.cri_check")


# gRPC shares connections between channels to the same target unless told not to; a check that
# must open its own connection (and a probe that must keep its own) needs a private pool.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


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
        with grpc.insecure_channel(f"unix://{sock}", options=OWN_CONNECTION) as channel:
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


class RelayProbe:
    """Checks an endpoint the way kubelet uses it, not only the way a newcomer would.

    Kubelet keeps ONE long-lived connection and sends every call over it. A relay can accept
    and answer on a fresh connection while that one is stalled (a held request that used up
    its flow-control window once wedged kubelet's connection while ``Version`` on a new one
    answered in 75 ms). So each check calls Version twice: on a new connection (is it
    accepting and answering?) and on a connection kept open between checks (does an existing
    connection still move?). The kept connection is only replaced after it has broken for
    good (the relay restarted), never because it stalled: a stall is what must be seen.
    """

    def __init__(self, host: Host, endpoint: str, timeout: float = 2.0) -> None:
        self.host, self.endpoint, self.timeout = host, endpoint, timeout
        self._channel: grpc.Channel | None = None

    def check(self) -> str:
        """"name version" of the runtime behind the endpoint, or CriUnavailable saying which check failed."""
        answer = cri_version(self.host, self.endpoint, self.timeout)
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.host.path(endpoint_path(self.endpoint))}",
                                                  options=OWN_CONNECTION)
        try:
            api_pb2_grpc.RuntimeServiceStub(self._channel).Version(api_pb2.VersionRequest(version="v1"),
                                                                   timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.UNAVAILABLE:  # the connection broke (e.g. a restart): start a new one
                self.close()
            name = code.name if code else "?"
            raise CriUnavailable(f"CRI Version on {self.endpoint} answers on a new connection but not on one kept "
                                 f"open (as kubelet's is): {name}: {exc.details() if hasattr(exc, 'details') else exc}"
                                 ) from exc
        return answer

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
