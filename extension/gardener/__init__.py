"""Python ports of the generic parts of Gardener's extension library.

``status`` (lastOperation, lastError, operation type), ``triggers`` (when an Extension needs
processing), ``cluster`` (the Cluster resource), ``health`` (ManagedResource conditions to
Extension conditions), ``heartbeat`` (the heartbeat Lease), ``managed_resources`` (Secret plus
ManagedResource), ``imagevector`` and ``versions`` (image vector lookups), ``kube`` (API clients).
They follow Gardener's contracts and take only names (API group, finalizer, annotations) from
``extension.constants``; the extension's own logic sits one level up.
"""
