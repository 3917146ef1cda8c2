"""What happens before the relay serves: wait for the runtime, sync state, prepare the socket and pid file,
and never let a bad config file stop kubelet's runtime.

A ``--force-config`` or ``--fallback-config`` that is invalid, or valid but does not fit this node (CPUs it
does not have), is set aside: cri-resmgr runs with the next config by precedence (the last good config the
agent pushed, the fallback, or the defaults: policy none) and says so in its log, in the metric
``cri_resmgr_config_errors_total`` and in a node annotation written through the agent (``ConfigNotice``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from resmgr.config import ConfigError
from resmgr.config.files import FALLBACK, FORCE, ConfigFile, StartupConfigs, read_config_file
from resmgr.options import RELAY_CONFIG_ERROR_ANNOTATION
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


def container_resources(client: UnaryClient, container_ids: list[str], timeout: float = 10.0) -> dict[str, Any]:
    """Container id -> the ContainerResources the runtime reports (ContainerStatus), for those it reports:
    how kubelet sized a container the resource manager never saw (created while kubelet bypassed the relay)."""
    found: dict[str, Any] = {}
    for cid in container_ids:
        try:
            status = client.call_method(RUNTIME, "ContainerStatus", api_pb2.ContainerStatusRequest(container_id=cid),
                                        timeout).status
        except RpcError as err:  # gone meanwhile, say: it is then adopted without sizes, or dropped
            log.info("no status for container %s: %s", cid[:13], err)
            continue
        if status.HasField("resources"):
            found[cid] = status.resources
    return found


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


# -- config files that do not work ---------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigProblem:
    """A config file given on the command line that cri-resmgr runs without."""

    source: str  # FORCE or FALLBACK
    path: str
    error: str

    def describe(self, running: str) -> str:
        return f"{self.source} {self.path} not used: {self.error}; running with the config from {running}"


def load_startup_files(force_path: str | None, fallback_path: str | None
                       ) -> tuple[StartupConfigs, list[ConfigProblem]]:
    """Read both files; one that cannot be read or fails the schema (the relay's own sections included)
    is left out and returned as a problem instead of stopping cri-resmgr."""
    files: dict[str, ConfigFile | None] = {FORCE: None, FALLBACK: None}
    problems: list[ConfigProblem] = []
    for label, path in ((FORCE, force_path), (FALLBACK, fallback_path)):
        if not path:
            continue
        try:
            file = read_config_file(path)
        except ConfigError as err:
            problems.append(ConfigProblem(label, path, str(err)))
            continue
        files[label] = file
    return StartupConfigs(force=files[FORCE], fallback=files[FALLBACK]), problems


def without_unfit_files(build: Callable[[StartupConfigs], Any], files: StartupConfigs,
                        problems: list[ConfigProblem]) -> tuple[Any, StartupConfigs]:
    """``build(files)``; a file whose config does not fit this node (the policy refuses it) is left out and
    ``build`` tried again, so cri-resmgr starts on the next config by precedence."""
    while True:
        try:
            return build(files), files
        except ConfigError as err:
            file = {FORCE: files.force, FALLBACK: files.fallback}.get(err.source)
            if file is None:
                raise
            problems.append(ConfigProblem(err.source, file.path, str(err)))
            files = dataclasses.replace(files, **{"force" if err.source == FORCE else "fallback": None})


class NodePatcher(Protocol):
    def patch_node(self, patch: dict[str, Any], patch_type: str = "strategic") -> None: ...


class ConfigNotice:
    """Keeps the node annotation RELAY_CONFIG_ERROR_ANNOTATION saying what config cri-resmgr runs without,
    through the agent's PatchNode; retried with backoff while the agent is not there (it starts after us)."""

    def __init__(self, agent: NodePatcher | None, *, max_backoff: float = 30.0) -> None:
        self.agent = agent
        self.max_backoff = max_backoff
        self._wanted: str | None = None
        self._written: str | None | bool = False  # False: nothing written yet (None removes the annotation)
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set(self, message: str | None) -> None:
        """The annotation's text, or None to remove it."""
        self._wanted = message
        if self.agent is not None and self._thread is None and (message is not None or self._written is not False):
            self._thread = threading.Thread(target=self._run, name="config-notice", daemon=True)
            self._thread.start()
        self._changed.set()

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        backoff = 1.0
        warned = False
        while not self._stop.is_set():
            self._changed.wait()
            self._changed.clear()
            wanted = self._wanted
            if wanted == self._written or self._stop.is_set():
                continue
            try:
                self._write(wanted)
            except Exception as err:  # AgentError, or anything the transport raises: retry, never die
                if not warned:
                    log.warning("cannot %s through the agent yet (%s); retrying", self.what, err)
                    warned = True
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, self.max_backoff)
                self._changed.set()
                continue
            self._written, backoff, warned = wanted, 1.0, False

    # What is sent, and how; subclasses send other things through the agent the same way.
    what = "annotate the node"

    def _write(self, wanted: Any) -> None:
        assert self.agent is not None
        self.agent.patch_node({"metadata": {"annotations": {RELAY_CONFIG_ERROR_ANNOTATION: wanted}}}, "merge")
        log.info("node annotation %s %s", RELAY_CONFIG_ERROR_ANNOTATION, "set" if wanted else "removed")
