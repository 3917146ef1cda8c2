"""Controllers beside the placement policy: CPU classes (cpufreq/uncore), RDT (resctrl), block I/O (cgroups).

One module per controller, each plain functions over a root path (sysfs, resctrl, cgroup tree);
``controllers`` runs them with upstream's modes and hooks them to the resource manager.
"""
