"""Fixtures for relay integration tests: the real cri-resmgr in front of the shared containerd."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from integration.relay.relay_process import RelayProcess, running_relay

from resmgr.relay.hooks import NoopHook, ResourceManagerHook
from resmgr.relay.server import Relay

DUMP_CONFIG = """\
dump:
  Config: 'off:.*,full:((Create)|(Start)|(Run)|(Update)|(Stop)|(Remove)).*,short:ListContainers'
  File: {file}
"""


@pytest.fixture(scope="module")
def relay(containerd) -> Iterator[RelayProcess]:
    """cri-resmgr (policy none) with message dumping on, as a separate process."""
    # The dump file lies in the relay dir (workdir/state), as dump files must.
    with running_relay(containerd, "--force-config", DUMP_CONFIG.format(file="{workdir}/state/dump.jsonl")) as proc:
        yield proc


@pytest.fixture(params=["splice", "grpc"])
def inproc_relay(request, containerd) -> Iterator[Callable[..., Relay]]:
    """Start Relay objects in this process (to inject hooks), with each transport; stopped after the test."""
    relays: list[Relay] = []
    workdir = Path(tempfile.mkdtemp(prefix="relay-", dir="/tmp"))

    def start(hook: ResourceManagerHook | None = None, runtime_socket: str | None = None, **kwargs) -> Relay:
        relay = Relay(relay_socket=str(workdir / f"r{len(relays)}.sock"),
                      runtime_socket=runtime_socket or containerd.socket, hook=hook or NoopHook(),
                      transport=request.param, **kwargs)
        relays.append(relay)
        relay.start()
        relay.endpoint = "unix://" + relay.relay_socket  # type: ignore[attr-defined]
        return relay

    yield start
    for relay in relays:
        relay.stop(grace=1)
    containerd.remove_all()
    shutil.rmtree(workdir, ignore_errors=True)
