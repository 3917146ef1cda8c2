"""Transport for cri-resmgr's own calls: grpclib on unix sockets (``unixrpc``) and socket paths (``sockets``)."""
