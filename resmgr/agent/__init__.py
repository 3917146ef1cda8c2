"""cri-resmgr-agent: pushes ConfigMap and Adjustment configuration to cri-resmgr."""
