"""cri-resmgr: a CRI relay between kubelet and containerd that applies CPU and memory placement policies."""

__version__ = "0.1.0"
