"""Node-side installer that puts cri-resmgr on a shoot node and reverses it exactly."""
