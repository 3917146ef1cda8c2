"""The controllers the resource manager runs beside the policy: CPU classes, RDT and block I/O.

Like cri-resource-manager's control package, each controller has a mode from
``resource-manager.control.Controllers`` (default Relaxed):

* Disabled: not run;
* Required: it must configure, or the config is refused (the previous one stays);
* Optional / Relaxed: a controller that cannot configure (no resctrl, no cpufreq, ...) is
  disabled with an error in the log until the next config.

Unlike upstream, a failing container hook never fails a CRI call, whatever the mode: the hooks
run after the runtime call succeeded (post-start, post-update), so failing the kubelet call would
only hide a container that runs. Failures are logged and counted (``errors``) instead.

A container's class: the Adjustment's ``classes.rdt``/``classes.blockio`` if one applies, else
the pod annotation ``rdtclass.cri-resource-manager.intel.com`` / ``blockioclass...`` (``/pod`` or
``/container.<name>``), else its QoS class (RDT: only when classes named after QoS classes exist).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from resmgr.config import ConfigError
from resmgr.config.sections import BlockIOSection, ConfigSections, CpuSection, RdtSection, ResourceManagerSection
from resmgr.control import blockio, cpu_classes, rdt, toptier
from resmgr.control.cgroups import CGROUP_ROOT, CgroupError, container_pids, controller_root, find_container_dir
from resmgr.model.resources import ContainerInfo, PodInfo, preference_annotation
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.control")

RDT_CLASS_KEY = "rdtclass.cri-resource-manager.intel.com"
BLOCKIO_CLASS_KEY = "blockioclass.cri-resource-manager.intel.com"
CONTROLLER_NAMES = ("blockio", "cpu", "rdt")
# Upstream controllers this cri-resmgr does not run as such: cri is the CRI path itself (always on),
# memory (top-tier limits) and page-migration belong to memory tiers.
OTHER_CONTROLLERS = ("cri", "memory", "page-migration")
DEFAULT_MODE = "Relaxed"


def controller_modes(section: ResourceManagerSection) -> dict[str, str]:
    """Each controller's mode from ``resource-manager.control.Controllers`` (names match case-insensitively)."""
    modes = dict.fromkeys(CONTROLLER_NAMES, DEFAULT_MODE)
    for name, mode in section.controllers.items():
        key = name.lower()
        if key in modes:
            modes[key] = mode
        elif key not in OTHER_CONTROLLERS:
            log.warning("resource-manager.control.Controllers: unknown controller %r ignored", name)
    return modes


def container_classes(container: ContainerInfo, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The RDT and block I/O classes a container asks for (before the controllers resolve them)."""
    overrides = overrides or {}
    rdt_class = overrides.get("rdt") or preference_annotation(container, RDT_CLASS_KEY) or rdt.POD_QOS_CLASS
    io_class = overrides.get("blockio") or preference_annotation(container, BLOCKIO_CLASS_KEY) or container.qos
    return {"rdt": rdt_class, "blockio": io_class}


_FAILURES = (cpu_classes.CpuClassError, rdt.RdtError, blockio.BlockIOError, OSError)


def _required(name: str, exc: Exception) -> ConfigError:
    return ConfigError(name, f"the {name} controller is Required but cannot apply it: {exc}")


class Controllers:
    """Configures the controllers from a config and runs their container hooks."""

    def __init__(self, topology: Topology, *, sysfs_root: str | Path = "/", cgroup_root: str | Path = CGROUP_ROOT,
                 resctrl_root: str | Path = rdt.RESCTRL_ROOT, dev_root: str | Path = "/", **rdt_options: Any) -> None:
        self.sysfs_root = Path(sysfs_root)
        self.cgroup_root = Path(cgroup_root)
        self.dev_root = Path(dev_root)
        self.cpu = cpu_classes.CpuClassController(sysfs_root, topology)
        self.rdt = rdt.RdtController(resctrl_root, **rdt_options)
        self.blockio_classes: dict[str, blockio.BlockIOClass] = {}
        self.modes = dict.fromkeys(CONTROLLER_NAMES, "Disabled")
        self.running = dict.fromkeys(CONTROLLER_NAMES, False)
        self.errors: Counter[tuple[str, str]] = Counter()  # (controller, stage) -> failures
        self.toptier = toptier.supported(self.cgroup_root)  # memory tiers' top tier limits (patched kernels only)

    # -- configuration ----------------------------------------------------------------------
    def configure(self, sections: ConfigSections, *, strict: bool = True) -> None:
        """Apply the controller sections of a checked config.

        Raises ConfigError when a Required controller cannot take it and ``strict`` (a pushed config,
        refused as a whole); at startup (``strict`` False) the failure is logged and the controller left off.
        """
        modes = controller_modes(sections.resource_manager)
        steps = {"cpu": lambda: self.cpu.configure(cpu_classes.parse_cpu_classes(sections.cpu)),
                 "rdt": lambda: self.rdt.configure(sections.rdt),
                 "blockio": lambda: self._configure_blockio(sections.blockio)}
        for name in CONTROLLER_NAMES:
            mode = modes[name]
            if mode == "Disabled":
                if self.running[name]:
                    log.info("controller %s: disabled", name)
                self._stop(name)
            else:
                try:
                    steps[name]()
                except _FAILURES as exc:
                    self.errors[(name, "configure")] += 1
                    self._stop(name)
                    if mode == "Required" and strict:
                        raise _required(name, exc) from None
                    log.error("controller %s (%s) cannot start, disabled until the next config: %s", name, mode, exc)
                    mode = "Disabled"
                else:
                    self.running[name] = True
            self.modes[name] = mode
        log.info("controllers: %s", ", ".join(f"{n} {self.modes[n].lower()}" for n in CONTROLLER_NAMES))

    def check(self, sections: ConfigSections) -> None:
        """What ``configure`` would refuse, found without applying anything (a config's dry run): raises ConfigError
        when a Required controller's section does not parse or does not fit this node. Reads only; a failure that
        only writing shows (resctrl running out of groups) is left to the real apply."""
        modes = controller_modes(sections.resource_manager)
        checks = {"cpu": lambda: self.cpu.check(cpu_classes.parse_cpu_classes(sections.cpu)),
                  "rdt": lambda: self.rdt.check(sections.rdt),
                  "blockio": lambda: blockio.parse_blockio_classes(sections.blockio, self.dev_root, self.sysfs_root)}
        for name in CONTROLLER_NAMES:
            if modes[name] == "Required":
                try:
                    checks[name]()
                except _FAILURES as exc:
                    raise _required(name, exc) from None

    def _stop(self, name: str) -> None:
        if name == "cpu" and self.running[name]:
            self.cpu.configure(cpu_classes.parse_cpu_classes(CpuSection()))
        elif name == "rdt" and self.running[name]:
            try:
                self.rdt.configure(RdtSection(mode="Disabled"))
            except rdt.RdtError as exc:
                log.error("rdt: cannot remove its groups: %s", exc)
        elif name == "blockio":
            self.blockio_classes = {}
        self.running[name] = False

    def _configure_blockio(self, section: BlockIOSection) -> None:
        classes, warnings = blockio.parse_blockio_classes(section, self.dev_root, self.sysfs_root)
        for w in warnings:
            log.warning("blockio: %s", w)
        self.blockio_classes = classes

    # -- container hooks -----------------------------------------------------------------------
    def container_started(self, container: ContainerInfo, pod: PodInfo | None,
                          overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """Post-start (and post-update, and after a class change): put the container in its classes.

        Returns what was applied (controller -> class); failures are logged and counted, never raised.
        """
        classes = container_classes(container, overrides)
        applied: dict[str, str] = {}
        parent = pod.cgroup_parent if pod is not None else ""
        if self.running["rdt"] and self.rdt.active:
            try:
                cgroup = find_container_dir(controller_root(self.cgroup_root, "cpu"), parent, container.id)
                applied["rdt"] = self.rdt.assign(container_pids(cgroup), classes["rdt"], container.qos)
                log.info("container %s/%s: RDT class %s", container.pod_name, container.name, applied["rdt"])
            except (rdt.RdtError, CgroupError) as exc:
                self._hook_failed("rdt", container, exc)
        if self.running["blockio"]:
            applied_io = self._apply_blockio(container, parent, classes["blockio"])
            if applied_io:
                applied["blockio"] = applied_io
        limit = self._apply_toptier(container, parent, overrides)
        if limit is not None:
            applied[toptier.OVERRIDE_KEY] = str(limit)
        return applied

    def _apply_toptier(self, container: ContainerInfo, parent: str, overrides: Mapping[str, str] | None
                       ) -> int | None:
        try:
            limit = toptier.toptier_limit(container, overrides)
            if not self.toptier:
                if limit != toptier.UNLIMITED:
                    log.warning("container %s/%s: top tier memory limit %d not applied: this kernel has no %s",
                                container.pod_name, container.name, limit, toptier.TOPTIER_FILE)
                return None
            toptier.write_limit(find_container_dir(controller_root(self.cgroup_root, "memory"), parent,
                                                   container.id), limit)
        except (toptier.ToptierError, CgroupError) as exc:
            self.errors[("memory", "container")] += 1
            log.error("top tier memory limit failed for container %s/%s (%s): %s", container.pod_name,
                      container.name, container.id, exc)
            return None
        log.info("container %s/%s: top tier memory limit %d", container.pod_name, container.name, limit)
        return limit

    def _apply_blockio(self, container: ContainerInfo, parent: str, wanted: str) -> str | None:
        cls = self.blockio_classes.get(wanted)
        if cls is None:
            if not self.blockio_classes or wanted == container.qos:
                return None  # the QoS default with no class of that name: nothing to do (upstream's idle case)
            self._hook_failed("blockio", container, blockio.BlockIOError(f"unknown block I/O class {wanted!r}"))
            return None
        try:
            cgroup = find_container_dir(controller_root(self.cgroup_root, "blkio"), parent, container.id)
            blockio.apply_class(cgroup, cls, self.cgroup_root)
        except (blockio.BlockIOError, CgroupError) as exc:
            self._hook_failed("blockio", container, exc)
            return None
        log.info("container %s/%s: block I/O class %s", container.pod_name, container.name, wanted)
        return wanted

    def _hook_failed(self, name: str, container: ContainerInfo, exc: Exception) -> None:
        self.errors[(name, "container")] += 1
        log.error("controller %s (%s) failed for container %s/%s (%s): %s", name, self.modes[name],
                  container.pod_name, container.name, container.id, exc)

    def failure_counts(self) -> list[tuple[tuple[str, str], float]]:
        """((controller, stage), failures so far) for the metrics."""
        return [(key, float(n)) for key, n in sorted(self.errors.items())]

    def sync_cpu_classes(self, wanted: Mapping[str, frozenset[int]]) -> None:
        """The policy's CPU class assignment (class -> CPUs) after a decision."""
        if not self.running["cpu"]:
            return
        errors = self.cpu.sync(wanted)
        if errors:
            self.errors[("cpu", "assign")] += len(errors)
