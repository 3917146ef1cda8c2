"""Transport for cri-resmgr's own calls: unary gRPC on unix sockets (``unixrpc``) and socket paths (``sockets``)."""
