"""Raw-bytes forwarding of gRPC calls to the runtime over long-lived channels.

Nothing here decodes a message: requests and responses are ``bytes`` end to end
(no (de)serializers on either side). Metadata, deadlines, status codes, details and
trailing metadata (including ``grpc-status-details-bin``) are carried across.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc

from resmgr.relay.methods import IMAGE_SERVICE, MAX_MESSAGE_BYTES, split_path
from resmgr.rpc.sockets import endpoint_path, endpoint_target

log = logging.getLogger(__name__)

# Kubelet sends and accepts CRI messages up to 16 MiB (ListContainers on busy nodes).
CHANNEL_OPTIONS: tuple[tuple[str, object], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Transparent retries would replay state-changing CRI calls behind kubelet's back.
    ("grpc.enable_retries", 0),
    ("grpc.enable_http_proxy", 0),
)

# Headers owned by the transport; everything else is caller metadata and is forwarded.
_TRANSPORT_HEADERS = frozenset({
    "user-agent", "content-type", "te", "host", "grpc-timeout", "grpc-encoding",
    "grpc-accept-encoding", "grpc-status", "grpc-message", "accept-encoding", "content-encoding",
})

# No deadline shows up as a huge time_remaining().
_NO_DEADLINE = 1e8


def forwardable_metadata(metadata: tuple[tuple[str, str | bytes], ...] | None
                         ) -> tuple[tuple[str, str | bytes], ...] | None:
    """Caller metadata minus transport headers; None when nothing is left (the common case)."""
    if not metadata:
        return None
    kept = tuple((k, v) for k, v in metadata if not k.startswith(":") and k not in _TRANSPORT_HEADERS)
    return kept or None


def remaining_timeout(context: grpc.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    if remaining is None or remaining > _NO_DEADLINE:
        return None
    return max(remaining, 0.0)


def reraise_upstream_error(err: grpc.RpcError, context: grpc.ServicerContext, runtime: str = "") -> None:
    """Answer the caller with the runtime's status, details and trailing metadata; raises."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    trailing = forwardable_metadata(err.trailing_metadata()) if hasattr(err, "trailing_metadata") else None
    if trailing:
        context.set_trailing_metadata(trailing)
    if code is None or code == grpc.StatusCode.OK:
        code = grpc.StatusCode.UNKNOWN
    if code == grpc.StatusCode.UNAVAILABLE and runtime and _is_connection_failure(details or ""):
        # The runtime was not reached at all: say where the relay looked, like the splice transport does.
        details = f"cri-resmgr: runtime at {runtime} is unavailable: {details}"
    context.abort(code, details or "")


def _is_connection_failure(details: str) -> bool:
    # gRPC's own wording when it has no transport; the runtime's own UNAVAILABLE answers pass unchanged.
    return any(text in details for text in ("failed to connect", "Socket closed", "Connection reset",
                                            "Broken pipe", "connection refused", "No such file"))


class Upstream:
    """One long-lived channel to the runtime (and one to the image service if it is elsewhere)."""

    def __init__(self, runtime_endpoint: str, image_endpoint: str | None = None) -> None:
        self.runtime_endpoint = runtime_endpoint
        self.image_endpoint = image_endpoint or runtime_endpoint
        self.runtime_channel = grpc.insecure_channel(endpoint_target(runtime_endpoint),
                                                     options=CHANNEL_OPTIONS)
        if endpoint_target(self.image_endpoint) == endpoint_target(runtime_endpoint):
            self.image_channel = self.runtime_channel
        else:
            self.image_channel = grpc.insecure_channel(endpoint_target(self.image_endpoint),
                                                       options=CHANNEL_OPTIONS)
        self._unary: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._unary_stream: dict[str, grpc.UnaryStreamMultiCallable] = {}
        self._stream_stream: dict[str, grpc.StreamStreamMultiCallable] = {}

    def endpoint_for(self, path: str) -> str:
        service, _ = split_path(path)
        return endpoint_path(self.image_endpoint if service == IMAGE_SERVICE else self.runtime_endpoint)

    def channel_for(self, path: str) -> grpc.Channel:
        service, _ = split_path(path)
        return self.image_channel if service == IMAGE_SERVICE else self.runtime_channel

    def unary(self, path: str) -> grpc.UnaryUnaryMultiCallable:
        callable_ = self._unary.get(path)
        if callable_ is None:
            callable_ = self._unary[path] = self.channel_for(path).unary_unary(path)
        return callable_

    def unary_stream(self, path: str) -> grpc.UnaryStreamMultiCallable:
        callable_ = self._unary_stream.get(path)
        if callable_ is None:
            callable_ = self._unary_stream[path] = self.channel_for(path).unary_stream(path)
        return callable_

    def stream_stream(self, path: str) -> grpc.StreamStreamMultiCallable:
        callable_ = self._stream_stream.get(path)
        if callable_ is None:
            callable_ = self._stream_stream[path] = self.channel_for(path).stream_stream(path)
        return callable_

    def close(self) -> None:
        self.runtime_channel.close()
        if self.image_channel is not self.runtime_channel:
            self.image_channel.close()


def forward_unary(upstream_call: grpc.UnaryUnaryMultiCallable, request: bytes,
                  context: grpc.ServicerContext, *, cancellable: bool, runtime: str = "") -> bytes:
    """Forward one unary call; raises (via context.abort) with the runtime's status on error.

    The blocking call polls its own completion queue in this thread, avoiding a hop to the
    channel's thread. Slow or unknown methods use a future instead, so that a caller that
    cancels also cancels the runtime call.
    """
    metadata = forwardable_metadata(context.invocation_metadata())
    timeout = remaining_timeout(context)
    try:
        if cancellable:
            future = upstream_call.future(request, timeout=timeout, metadata=metadata)
            context.add_callback(future.cancel)
            response = future.result()
            call = future
        else:
            response, call = upstream_call.with_call(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as err:
        reraise_upstream_error(err, context, runtime)
        raise  # unreachable: abort raises
    except grpc.FutureCancelledError:
        context.abort(grpc.StatusCode.CANCELLED, "cancelled by the caller")
        raise
    _copy_response_metadata(call, context)
    return response


def _copy_response_metadata(call: grpc.Call, context: grpc.ServicerContext) -> None:
    initial = forwardable_metadata(call.initial_metadata())
    if initial:
        context.send_initial_metadata(initial)
    trailing = forwardable_metadata(call.trailing_metadata())
    if trailing:
        context.set_trailing_metadata(trailing)


def relay_stream(responses: grpc.Call, context: grpc.ServicerContext, runtime: str = "") -> Iterator[bytes]:
    """Yield the runtime's streamed responses; cancel the runtime stream when the caller goes away."""
    context.add_callback(responses.cancel)
    sent_initial = False
    try:
        for message in responses:  # type: ignore[attr-defined]
            if not sent_initial:
                sent_initial = True
                initial = forwardable_metadata(responses.initial_metadata())
                if initial:
                    context.send_initial_metadata(initial)
            yield message
    except grpc.RpcError as err:
        if not context.is_active():
            return  # the caller cancelled; the runtime stream was cancelled by the callback
        reraise_upstream_error(err, context, runtime)
    trailing = forwardable_metadata(responses.trailing_metadata())
    if trailing:
        context.set_trailing_metadata(trailing)


def forward_unary_stream(upstream_call: grpc.UnaryStreamMultiCallable, request: bytes,
                         context: grpc.ServicerContext, runtime: str = "") -> Iterator[bytes]:
    responses = upstream_call(request, timeout=remaining_timeout(context),
                              metadata=forwardable_metadata(context.invocation_metadata()))
    return relay_stream(responses, context, runtime)


def forward_stream_stream(upstream_call: grpc.StreamStreamMultiCallable, requests: Iterator[bytes],
                          context: grpc.ServicerContext, runtime: str = "") -> Iterator[bytes]:
    """Any-cardinality forwarding, used for methods the relay does not know.

    On the wire a unary call is a stream with one message each way, so relaying it as
    stream-stream is exact whatever the method's real shape is.
    """
    responses = upstream_call(requests, timeout=remaining_timeout(context),
                              metadata=forwardable_metadata(context.invocation_metadata()))
    return relay_stream(responses, context, runtime)
