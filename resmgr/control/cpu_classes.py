"""CPU classes: per-class CPU frequency limits (cpufreq) and uncore frequency limits, in sysfs.

Upstream's ``cpu.classes`` section names classes with ``minFreq``/``maxFreq`` (kHz, written to
``cpuN/cpufreq/scaling_{min,max}_freq``) and ``uncoreMinFreq``/``uncoreMaxFreq`` (kHz, written
per package and die to ``intel_uncore_frequency/package_PP_die_DD/{min,max}_freq_khz``). A policy
says which CPUs belong to which class (balloons: a balloon type's ``CPUClass`` for its CPUs,
``IdleCPUClass`` for the free ones); ``CpuClassController.sync`` writes the limits of every CPU
whose class changed. A die gets the highest uncore limits of the classes present on it, as upstream.

Differences from upstream, on purpose: a limit of 0 means "the hardware's limit"
(``cpuinfo_{min,max}_freq``) instead of writing 0, so a CPU leaving a throttled class is not left
throttled; min and max are written in the order that never makes min > max on the way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from resmgr.config.sections import CpuClassSection, CpuSection
from resmgr.topology.cpuset import format_cpuset
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.control.cpu")

CPU_DIR = Path("sys/devices/system/cpu")
UNCORE_DIR = CPU_DIR / "intel_uncore_frequency"


class CpuClassError(RuntimeError):
    """A class's limits could not be written."""


CpuClass = CpuClassSection  # a class as the typed ``cpu`` section gives it


def parse_cpu_classes(section: CpuSection) -> dict[str, CpuClass]:
    """The typed ``cpu`` section's classes by name."""
    return dict(section.classes)


def _write(path: Path, value: int) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as exc:
        raise CpuClassError(f"cannot write {value} to {path}: {exc.strerror or exc}") from None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def set_cpu_freq(sysfs_root: Path, cpu: int, min_freq: int, max_freq: int) -> None:
    """Write one CPU's scaling limits (kHz; 0: the hardware's own limit)."""
    cpufreq = sysfs_root / CPU_DIR / f"cpu{cpu}" / "cpufreq"
    if not cpufreq.is_dir():
        raise CpuClassError(f"CPU {cpu} has no cpufreq in sysfs ({cpufreq}); is a cpufreq driver loaded?")
    lo = min_freq or _read_int(cpufreq / "cpuinfo_min_freq")
    hi = max_freq or _read_int(cpufreq / "cpuinfo_max_freq")
    current_max = _read_int(cpufreq / "scaling_max_freq")
    writes = [("scaling_min_freq", lo), ("scaling_max_freq", hi)]
    if lo is not None and current_max is not None and lo > current_max:
        writes.reverse()  # raise max first, or the kernel refuses min > max
    for name, value in writes:
        if value is not None:
            _write(cpufreq / name, value)


def uncore_available(sysfs_root: Path) -> bool:
    return (sysfs_root / UNCORE_DIR).is_dir()


def set_uncore_freq(sysfs_root: Path, package: int, die: int, min_freq: int, max_freq: int) -> None:
    """Write one die's uncore limits (kHz); a 0 limit is left as it is (upstream)."""
    d = sysfs_root / UNCORE_DIR / f"package_{package:02d}_die_{die:02d}"
    if not d.is_dir():
        raise CpuClassError(f"no uncore frequency control for package {package} die {die} ({d})")
    writes = [("min_freq_khz", min_freq), ("max_freq_khz", max_freq)]
    current_max = _read_int(d / "max_freq_khz")
    if min_freq and current_max is not None and min_freq > current_max:
        writes.reverse()
    for name, value in writes:
        if value:
            _write(d / name, value)


def effective_uncore(die_cpus: frozenset[int], classes: Mapping[str, CpuClass],
                     assignments: Mapping[str, frozenset[int]]) -> tuple[int, int]:
    """(min, max) uncore kHz on a die: the highest of the classes with CPUs on it (upstream's rule)."""
    lo = hi = 0
    for name, cpus in assignments.items():
        cls = classes.get(name)
        if cls is not None and cpus & die_cpus:
            lo, hi = max(lo, cls.uncore_min_freq), max(hi, cls.uncore_max_freq)
    return lo, hi


class CpuClassController:
    """Keeps every CPU's frequency limits at its class's; remembers which CPUs are in which class."""

    name = "cpu"

    def __init__(self, sysfs_root: str | Path, topology: Topology) -> None:
        self.sysfs_root = Path(sysfs_root)
        self.topology = topology
        self.classes: dict[str, CpuClass] = {}
        self.assignments: dict[str, frozenset[int]] = {}

    @property
    def active(self) -> bool:
        return bool(self.classes)

    def configure(self, classes: dict[str, CpuClass]) -> None:
        """New class definitions: check what they need, then re-apply every assigned CPU."""
        self.check(classes)
        self.classes = classes
        assignments, self.assignments = self.assignments, {}
        if not classes:  # no classes any more (or the controller stops): hardware limits back
            for cpu in sorted(set().union(*assignments.values())):
                try:
                    set_cpu_freq(self.sysfs_root, cpu, 0, 0)
                except CpuClassError as exc:
                    log.error("CPU class: %s", exc)
        elif assignments:
            self.sync(assignments)

    def check(self, classes: dict[str, CpuClass]) -> None:
        """What the classes need of the system (uncore frequency control); CpuClassError naming what is missing."""
        for cls in classes.values():
            if cls.has_uncore and not uncore_available(self.sysfs_root):
                raise CpuClassError(f"CPU class {cls.name!r} sets uncore limits but the system has no "
                                    f"uncore frequency control ({self.sysfs_root / UNCORE_DIR}); "
                                    f"is the intel_uncore_frequency driver loaded?")

    def sync(self, wanted: Mapping[str, frozenset[int]]) -> list[str]:
        """Bring the CPUs to the classes in ``wanted`` (class -> CPUs); returns the errors met.

        Only CPUs whose class changed are written (policies call this after every decision).
        A class missing from the configuration is remembered but not enforced, as upstream.
        """
        wanted = {name: frozenset(cpus) for name, cpus in wanted.items() if cpus and name}
        if wanted == self.assignments:
            return []
        errors: list[str] = []
        changed: set[int] = set()
        for name, cpus in wanted.items():
            new = cpus - self.assignments.get(name, frozenset())
            if not new:
                continue
            changed |= new
            cls = self.classes.get(name)
            if cls is None:
                log.warning("CPU class %r of CPUs %s is not configured (cpu.classes); limits left alone",
                            name, format_cpuset(new))
                continue
            for cpu in sorted(new):
                try:
                    set_cpu_freq(self.sysfs_root, cpu, cls.min_freq, cls.max_freq)
                except CpuClassError as exc:
                    errors.append(str(exc))
            log.info("CPUs %s in CPU class %r (frequency %s..%s kHz)", format_cpuset(new), name,
                     cls.min_freq or "hw", cls.max_freq or "hw")
        left = set().union(*self.assignments.values()) - set().union(*wanted.values())
        self.assignments = wanted
        for cpu in sorted(left):  # CPUs that left every class go back to the hardware's limits
            changed.add(cpu)
            try:
                set_cpu_freq(self.sysfs_root, cpu, 0, 0)
            except CpuClassError as exc:
                errors.append(str(exc))
        errors.extend(self._sync_uncore(frozenset(changed)))
        for e in errors:
            log.error("CPU class: %s", e)
        return errors

    def _sync_uncore(self, changed: frozenset[int]) -> list[str]:
        if not any(c.has_uncore for c in self.classes.values()):
            return []
        errors = []
        for (package, die), die_cpus in sorted(self.topology.dies.items()):
            if changed and not die_cpus & changed:
                continue
            lo, hi = effective_uncore(die_cpus, self.classes, self.assignments)
            if not lo and not hi:
                continue
            if lo and hi and lo > hi:
                log.warning("uncore min > max (%d > %d kHz) on package %d die %d", lo, hi, package, die)
            try:
                set_uncore_freq(self.sysfs_root, package, die, lo, hi)
            except CpuClassError as exc:
                errors.append(str(exc))
        return errors
