"""What the forwarder passes on to the runtime."""

from __future__ import annotations

from resmgr.relay.forwarding import forwardable_metadata


def test_metadata_keeps_caller_keys_only():
    md = ((":authority", "x"), ("user-agent", "kubelet"), ("x-trace", "1"), ("grpc-timeout", "1S"),
          ("bin-bin", b"\x00"))
    assert forwardable_metadata(md) == (("x-trace", "1"), ("bin-bin", b"\x00"))
    assert forwardable_metadata((("user-agent", "k"),)) is None
    assert forwardable_metadata(None) is None
