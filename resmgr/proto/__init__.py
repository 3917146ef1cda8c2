"""Our own gRPC APIs between cri-resmgr and cri-resmgr-agent (package ``criresmgr.v1``).

``config.proto`` is served by cri-resmgr on --config-socket, ``agent.proto`` by
cri-resmgr-agent on --agent-socket. The ``*_pb2*.py``/``.pyi`` files are generated
by ``make proto`` and committed; ``make proto-check`` (and a unit test) fail when
they are out of date.
"""

PROTO_FILES: tuple[str, ...] = ("resmgr/proto/config.proto", "resmgr/proto/agent.proto", "resmgr/nri/api.proto",
                                "resmgr/nri/ttrpc.proto")
