"""Hardware topology of the node: CPUs, cores, dies, packages and NUMA nodes from sysfs."""
