"""Hardware topology of the node: CPUs, cores, dies, packages and NUMA nodes from sysfs."""

from resmgr.topology.cpuset import CpusetError, format_cpuset, parse_cpuset
from resmgr.topology.model import CpuInfo, Topology
from resmgr.topology.sysfs import TopologyError, discover_topology

__all__ = ["CpuInfo", "CpusetError", "Topology", "TopologyError", "discover_topology", "format_cpuset",
           "parse_cpuset"]
