"""What happens before the relay serves: wait for the runtime, sync state, prepare the socket and pid file."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

from resmgr.relay.cri import api_pb2
from resmgr.rpc.sockets import endpoint_path
from resmgr.rpc.unixrpc import RpcError, UnaryClient

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The relay cannot start; the message says why and what to do."""


RUNTIME = api_pb2.DESCRIPTOR.services_by_name["RuntimeService"]


def wait_for_runtime(client: UnaryClient, endpoint: str, *, stop: threading.Event | None = None,
                     timeout: float | None = None, initial_backoff: float = 0.1,
                     max_backoff: float = 5.0) -> api_pb2.VersionResponse:
    """Block until the runtime socket exists and answers CRI Version; back off and log while waiting."""
    path = endpoint_path(endpoint)
    deadline = None if timeout is None else time.monotonic() + timeout
    backoff = initial_backoff
    attempt = 0
    while True:
        attempt += 1
        if os.path.exists(path):
            try:
                version = client.call_method(RUNTIME, "Version", api_pb2.VersionRequest(), timeout=max(1.0, backoff))
            except RpcError as err:
                problem = f"runtime socket does not answer CRI Version: {err}"
            else:
                log.info("runtime is up", extra={"endpoint": endpoint, "runtime": version.runtime_name,
                                                 "runtime_version": version.runtime_version,
                                                 "runtime_api_version": version.runtime_api_version})
                return version
        else:
            problem = "runtime socket does not exist (is containerd running?)"
        if deadline is not None and time.monotonic() + backoff > deadline:
            raise StartupError(f"gave up waiting for the runtime at {path} after {attempt} attempts: "
                               f"{problem}")
        log.warning("waiting for the runtime: %s; retrying in %.1fs", problem, backoff,
                    extra={"endpoint": endpoint, "attempt": attempt})
        if stop is not None:
            if stop.wait(backoff):
                raise StartupError("stopped while waiting for the runtime")
        else:
            time.sleep(backoff)
        backoff = min(backoff * 2, max_backoff)


@dataclass
class RuntimeSnapshot:
    """Pods and containers the runtime had when the relay started."""

    pods: list[api_pb2.PodSandbox] = field(default_factory=list)
    containers: list[api_pb2.Container] = field(default_factory=list)


def sync_from_runtime(client: UnaryClient, *, attempts: int = 3, timeout: float = 30.0) -> RuntimeSnapshot:
    """List pods and containers so the resource manager starts from the node's real state."""
    last_error: RpcError | None = None
    for attempt in range(1, attempts + 1):
        try:
            pods = client.call_method(RUNTIME, "ListPodSandbox", api_pb2.ListPodSandboxRequest(), timeout).items
            containers = client.call_method(RUNTIME, "ListContainers", api_pb2.ListContainersRequest(),
                                            timeout).containers
        except RpcError as err:
            last_error = err
            log.warning("startup sync failed (attempt %d/%d): %s", attempt, attempts, err)
            time.sleep(min(0.5 * attempt, 2.0))
            continue
        snapshot = RuntimeSnapshot(pods=list(pods), containers=list(containers))
        log.info("synced state from the runtime",
                 extra={"pods": len(snapshot.pods), "containers": len(snapshot.containers)})
        return snapshot
    assert last_error is not None
    raise StartupError(f"cannot list pods and containers from the runtime: {last_error}")


def write_pid_file(path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


def remove_pid_file(path: str) -> None:
    """Remove the pid file if it is still ours."""
    try:
        with open(path, encoding="ascii") as f:
            if f.read().strip() != str(os.getpid()):
                return
        os.unlink(path)
    except (FileNotFoundError, ValueError):
        pass
