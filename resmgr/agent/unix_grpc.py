"""grpcio on unix sockets for cri-resmgr-agent: serving the Agent API, dialling the config socket.

cri-resmgr itself serves and dials with resmgr.rpc.unixrpc (unary gRPC on h2), to stay small.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent import futures

import grpc

from resmgr.rpc.sockets import remove_stale_socket

log = logging.getLogger("resmgr.agent")

# A config may be up to MAX_CONFIG_BYTES (1 MiB); leave room for the envelope, refuse far larger.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
SOCKET_MODE = 0o660
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]


def serve_unix(register: Callable[[grpc.Server], None], socket_path: str, what: str, *,
               max_workers: int = 4) -> grpc.Server:
    """Start a gRPC server on ``socket_path`` (mode 0660; a stale socket is replaced, a live one refused)."""
    os.makedirs(os.path.dirname(socket_path) or ".", exist_ok=True)
    remove_stale_socket(socket_path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=what),
                         options=CHANNEL_OPTIONS)
    register(server)
    old_umask = os.umask(0o117)  # never more open than 0660, not even briefly
    try:
        port = server.add_insecure_port("unix://" + socket_path)
    finally:
        os.umask(old_umask)
    if not port:
        raise OSError(f"cannot listen on {what} socket {socket_path}")
    server.start()
    os.chmod(socket_path, SOCKET_MODE)
    log.info("%s API serving", what, extra={"socket": socket_path})
    return server


def stop_unix(server: grpc.Server | None, socket_path: str, grace: float = 1.0) -> None:
    if server is not None:
        server.stop(grace).wait()
    try:
        os.unlink(socket_path)
    except FileNotFoundError:
        pass


def unix_channel(socket_path: str) -> grpc.Channel:
    target = socket_path if socket_path.startswith("unix:") else "unix://" + socket_path
    return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)


def rpc_error_text(err: grpc.RpcError) -> str:
    """``CODE: details`` of a failed call, for one-line error messages."""
    code = err.code().name if hasattr(err, "code") else "UNKNOWN"
    details = err.details() if hasattr(err, "details") else str(err)
    return f"{code}: {details}"


def call_unary(stub: object, name: str, request: object, timeout: float,
               error: type[Exception], where: str) -> object:
    """Call ``stub.<name>(request)``; a gRPC failure becomes ``error("<name> on <where>: CODE: details")``."""
    try:
        return getattr(stub, name)(request, timeout=timeout)
    except grpc.RpcError as err:
        raise error(f"{name} on {where}: {rpc_error_text(err)}") from None
