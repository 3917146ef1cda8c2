"""cri-resmgr-webhook: copies a pod's resource requirements into the ``intel.com/resources`` annotation."""
