"""The CRI relay: serves CRI on the relay socket and forwards to the runtime.

Modules: ``methods`` (CRI method table), ``forwarding`` (raw-bytes forwarding),
``interception`` (resource-manager hook under one lock), ``startup`` (runtime wait,
state sync, socket and pid file), ``server`` (the gRPC server wiring, ``Relay``),
``settings`` (config files and the policy registry).
"""
