"""cri-resmgr's NRI front end: an external NRI plugin of containerd that drives the resource manager.

ttrpc (framing), mux (NRI's two connections over one socket), connection (the socket, its reader and the
calls in both directions), translate (NRI's pods and containers as the CRI messages the hook contract
takes, and the hook's answers as NRI adjustments and updates), plugin (the Plugin service containerd
calls), frontend (connect, register, reconnect, and the manager's outbox).
"""
