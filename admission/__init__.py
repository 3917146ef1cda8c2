"""gardener-extension-admission-cri-resmgr: the garden's validating webhook for Shoots that enable cri-resmgr."""
