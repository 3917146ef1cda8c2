"""The CRI v1 method table: which service a path belongs to, its message types, whether it streams.

Built from the descriptors in ``cri_api.v1.api_pb2`` (via resmgr.relay.cri) so new CRI versions need no edits here.
Methods missing from the table are still relayed (as raw bytes) by the forwarder.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from resmgr.relay.cri import api_pb2

# The largest gRPC message containerd and kubelet accept (16 MiB); the relay passes any message up to it.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

RUNTIME_SERVICE = "runtime.v1.RuntimeService"
IMAGE_SERVICE = "runtime.v1.ImageService"


@dataclass(frozen=True)
class CriMethod:
    service: str
    name: str
    request_class: type[Message]
    response_class: type[Message]
    server_streaming: bool
    client_streaming: bool

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"


@lru_cache(maxsize=1)
def cri_methods() -> dict[str, CriMethod]:
    """All CRI v1 methods by full path (``/runtime.v1.RuntimeService/Version``)."""
    table: dict[str, CriMethod] = {}
    for service in (RUNTIME_SERVICE, IMAGE_SERVICE):
        descriptor = api_pb2.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]]
        for method in descriptor.methods:
            entry = CriMethod(service=service, name=method.name,
                              request_class=GetMessageClass(method.input_type),
                              response_class=GetMessageClass(method.output_type),
                              server_streaming=method.server_streaming,
                              client_streaming=method.client_streaming)
            table[entry.path] = entry
    return table


def split_path(path: str) -> tuple[str, str]:
    """``/pkg.Service/Method`` -> (``pkg.Service``, ``Method``); malformed paths give ('', path)."""
    service, sep, name = path.lstrip("/").partition("/")
    if not sep:
        return "", path
    return service, name


def short_name(path: str) -> str:
    """The name used in logs, metrics and dump rules: ``Version``, ``PullImage``; others keep the path."""
    service, name = split_path(path)
    return name if service in (RUNTIME_SERVICE, IMAGE_SERVICE) else path
