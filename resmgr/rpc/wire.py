"""gRPC on the wire, shared by the splice relay and unixrpc: status codes by number and name
(https://grpc.github.io/grpc/core/md_doc_statuscodes.html) and the length-prefixed message framing."""

from __future__ import annotations

STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
                "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
STATUS_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}


def status_name(code: int) -> str:
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"CODE_{code}"


def grpc_message(data: bytes) -> bytes | None:
    """The single uncompressed message in gRPC length-prefixed framing, or None if it is anything else."""
    if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
        return None
    return data[5:]


def grpc_frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message
