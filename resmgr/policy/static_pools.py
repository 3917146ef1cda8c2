"""The ``static-pools`` policy: CMK (CPU Manager for Kubernetes) pools, as upstream's STP policy.

Pools are lists of CPU lists (``cpuLists``: ``Cpuset`` + ``Socket``), typically
``exclusive``, ``shared`` and ``infra``. A container asks for exclusive cores with the
extended resource ``cmk.intel.com/exclusive-cores`` (seen through the resource
webhook's annotation) and picks its pool with the ``STP_POOL`` environment variable,
``STP_SOCKET_ID`` and ``STP_NO_AFFINITY``, or with a legacy ``cmk isolate --pool=...``
command line, which is dropped from the command. The default pool is ``shared``.
An exclusive pool gives each container that many whole CPU lists of its own; a
non-exclusive pool gives one of its lists, shared. The container learns its CPUs
from CMK's variables ``CMK_CPUS_ASSIGNED``, ``CMK_CPUS_SHARED`` and ``CMK_CPUS_INFRA``.

Pools come from ``policy.static-pools.pools``; without them from the CMK directory
tree (``ConfDirPath``, default ``/etc/cmk``) and the pools file ``ConfFilePath``
(which wins). The node's ``cmk.intel.com/exclusive-cores`` capacity, the legacy
``cmk.intel.com/cmk-node`` label (``LabelNode``) and ``cmk=true:NoSchedule`` taint
(``TaintNode``) are published by cri-resmgr-agent from ``node_resources()``.

Differences from upstream: a non-exclusive pool with several lists hands out the
least used one (upstream picks at random), a container whose pool cannot serve it
is left alone (its request passes unchanged, logged) instead of failing, and
exclusive pools may not share CPUs with other pools (that would break exclusivity).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resmgr.config import MAX_CONFIG_BYTES, ConfigError, _load_yaml  # the configs' strict, bounded YAML loader
from resmgr.config.schema import STATIC_POOLS
from resmgr.config.sections import StaticPoolsSection
from resmgr.model.resources import ContainerInfo
from resmgr.policy.base import ContainerEdits, Grant, Placement, Policy, RestoreError, log
from resmgr.topology.cpuset import CpusetError, format_cpuset, parse_cpuset

SECTION = "policy.static-pools"
EXCLUSIVE_CORES = "cmk.intel.com/exclusive-cores"
CMK_NODE_LABEL = "cmk.intel.com/cmk-node"
CMK_TAINT = {"key": "cmk", "value": "true", "effect": "NoSchedule"}
ENV_POOL, ENV_SOCKET, ENV_NO_AFFINITY, ENV_NUM_CORES = "STP_POOL", "STP_SOCKET_ID", "STP_NO_AFFINITY", "CMK_NUM_CORES"
ENV_ASSIGNED, ENV_INFRA, ENV_SHARED = "CMK_CPUS_ASSIGNED", "CMK_CPUS_INFRA", "CMK_CPUS_SHARED"
POOL_INFRA, POOL_SHARED = "infra", "shared"
DEFAULT_CONF_DIR = "/etc/cmk"
# upstream checks CMK directory names with the same pattern
_CPULIST_NAME = re.compile(r"^(\d+|\d+-\d+)(,(\d+|\d+-\d+))*$")


@dataclass(frozen=True)
class CpuList:
    cpus: frozenset[int]
    socket: int
    text: str  # as configured: the cache identifies lists by it, as upstream does


@dataclass(frozen=True)
class StpPool:
    name: str
    exclusive: bool
    lists: tuple[CpuList, ...]

    @property
    def cpus(self) -> frozenset[int]:
        return frozenset().union(*(cl.cpus for cl in self.lists))

    def text(self, chosen: tuple[int, ...] | None = None) -> str:
        """The CMK_CPUS_* text of the chosen lists (all by default): their Cpuset strings as configured,
        joined with commas, as upstream (and CMK) write them; workloads may parse it literally."""
        lists = self.lists if chosen is None else (self.lists[i] for i in chosen)
        return ",".join(cl.text for cl in lists)


@dataclass(frozen=True)
class StpRequest:
    """What a container asks of static-pools."""

    pool: str = POOL_SHARED
    socket: int = -1
    cores: int = 0
    no_affinity: bool = False
    command: tuple[str, ...] | None = None  # the command without ``cmk isolate ...``, if it had one


# -- pool configuration -------------------------------------------------------------------------
def read_conf_file(path: str) -> dict[str, dict[str, Any]]:
    """A stand-alone pools file (sample-configs/static-pools-policy.conf.example), checked like the section."""
    field = f"{SECTION}.ConfFilePath"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"cannot read {path}: {exc}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(field, f"{path} is over the limit of {MAX_CONFIG_BYTES} bytes")
    data = _load_yaml(text, field, path) or {}
    return dict(STATIC_POOLS.check(data, f"{path}").get("pools") or {})


def read_conf_dir(conf_dir: str) -> dict[str, dict[str, Any]]:
    """CMK's directory tree: ``pools/<pool>/exclusive`` (1 or 0) and ``pools/<pool>/<socket>/<cpulist>/``."""
    field = f"{SECTION}.ConfDirPath"
    pools_dir = Path(conf_dir) / "pools"
    try:
        entries = sorted(p for p in pools_dir.iterdir() if p.is_dir())
    except OSError as exc:
        raise ConfigError(field, f"cannot list {pools_dir}: {exc.strerror}") from None
    pools: dict[str, dict[str, Any]] = {}
    for pool_dir in entries:
        try:
            exclusive = (pool_dir / "exclusive").read_text() == "1"
        except OSError as exc:
            raise ConfigError(field, f"cannot read {pool_dir / 'exclusive'}: {exc.strerror}") from None
        lists = []
        for socket_dir in sorted(p for p in pool_dir.iterdir() if p.is_dir()):
            if not socket_dir.name.isdigit():
                raise ConfigError(field, f"{socket_dir}: socket directories are named by number")
            for list_dir in sorted(socket_dir.iterdir()):
                if not _CPULIST_NAME.match(list_dir.name):
                    raise ConfigError(field, f"{list_dir}: {list_dir.name!r} does not look like a CPU list")
                lists.append({"Cpuset": list_dir.name, "Socket": int(socket_dir.name)})
        pools[pool_dir.name] = {"exclusive": exclusive, "cpuLists": lists}
    return pools


def configured_pools(section: StaticPoolsSection) -> tuple[dict[str, dict[str, Any]], str]:
    """Upstream's precedence: the config's pools, else ConfFilePath, else the CMK directory. Returns (pools, origin)."""
    if section.pools:
        return {name: dict(pool) for name, pool in section.pools.items()}, SECTION + ".pools"
    problems = []
    conf_file = section.conf_file_path
    if conf_file:
        try:
            return read_conf_file(conf_file), conf_file
        except ConfigError as exc:
            problems.append(str(exc))
    conf_dir = section.conf_dir_path or DEFAULT_CONF_DIR
    try:
        return read_conf_dir(conf_dir), conf_dir
    except ConfigError as exc:
        problems.append(str(exc))
    raise ConfigError(SECTION, "no pools configured: set policy.static-pools.pools, ConfFilePath or ConfDirPath ("
                               + "; ".join(problems) + ")")


def build_pools(raw: dict[str, dict[str, Any]], online: frozenset[int], origin: str) -> dict[str, StpPool]:
    pools: dict[str, StpPool] = {}
    for name, spec in sorted(raw.items()):
        field = f"{origin}.{name}" if origin.startswith(SECTION) else f"{SECTION} ({origin}): pool {name}"
        if not isinstance(spec, dict):
            raise ConfigError(field, "a pool is a mapping with 'exclusive' and 'cpuLists'")
        lists = []
        for i, entry in enumerate(spec.get("cpuLists") or []):
            text = str(entry.get("Cpuset", "")) if isinstance(entry, dict) else ""
            try:
                cpus = parse_cpuset(text)
            except CpusetError as exc:
                raise ConfigError(f"{field}.cpuLists[{i}].Cpuset", str(exc)) from None
            if not cpus:
                raise ConfigError(f"{field}.cpuLists[{i}].Cpuset", "empty CPU list")
            if cpus - online:
                raise ConfigError(f"{field}.cpuLists[{i}].Cpuset",
                                  f"CPUs {format_cpuset(cpus - online)} are not online "
                                  f"(online: {format_cpuset(online)})")
            lists.append(CpuList(cpus, int(entry.get("Socket", 0) or 0), text))
        pools[name] = StpPool(name, bool(spec.get("exclusive", False)), tuple(lists))
    for pool in pools.values():
        if not pool.exclusive:
            continue
        seen: set[int] = set()
        for cl in pool.lists:
            if cl.cpus & seen:
                raise ConfigError(f"{SECTION}: pool {pool.name}", f"exclusive CPU lists overlap on "
                                                                  f"{format_cpuset(cl.cpus & seen)}")
            seen |= cl.cpus
        for other in pools.values():
            if other is not pool and other.cpus & pool.cpus:
                raise ConfigError(f"{SECTION}: pool {pool.name}",
                                  f"exclusive pool shares CPUs {format_cpuset(other.cpus & pool.cpus)} with pool "
                                  f"{other.name}")
    return pools


# -- what a container asks for ------------------------------------------------------------------
def parse_cmk_isolate(words: list[str]) -> StpRequest | None:
    """Options of ``cmk isolate`` (upstream: Go flag parsing, unknown options skipped); None if absent."""
    if len(words) < 2 or Path(words[0]).name != "cmk" or words[1] != "isolate":
        return None
    pool, socket, no_affinity = "", -1, False
    rest = list(words[2:])
    while rest and rest[0].startswith("-") and rest[0] not in ("-", "--"):
        opt = rest.pop(0).lstrip("-")
        name, eq, value = opt.partition("=")
        if name == "no-affinity":
            no_affinity = value.lower() not in ("false", "0", "f") if eq else True
            continue
        if not eq and name in ("pool", "socket-id", "conf-dir") and rest:
            value = rest.pop(0)
        if name == "pool":
            pool = value
        elif name == "socket-id":
            try:
                socket = int(value)
            except ValueError:
                socket = -1
    if rest and rest[0] == "--":
        rest.pop(0)
    if not pool:
        return None
    return StpRequest(pool=pool, socket=socket, no_affinity=no_affinity, command=tuple(rest))


def cmk_args_from_command(command: list[str]) -> StpRequest | None:
    """``cmk isolate`` as the command itself, or inside one argument (``sh -c "cmk isolate ..."``)."""
    found = parse_cmk_isolate(command)
    if found is not None:
        return found
    for arg in command:
        try:
            words = shlex.split(arg)
        except ValueError:
            words = arg.split()
        found = parse_cmk_isolate(words)
        if found is not None:
            return found
    return None


def exclusive_cores(container: ContainerInfo) -> int:
    """The container's ``cmk.intel.com/exclusive-cores`` request (from the resource webhook's annotation)."""
    return max(0, int(container.extended_resources.get(EXCLUSIVE_CORES, 0)))


def stp_request(container: ContainerInfo) -> StpRequest:
    """Pool, socket and affinity as upstream reads them: the cmk command line, then the STP_* env (which wins)."""
    req = cmk_args_from_command(container.command) or StpRequest()
    pool, socket, no_affinity = req.pool, req.socket, req.no_affinity
    env = container.env
    if ENV_SOCKET in env:
        try:
            socket = int(env[ENV_SOCKET])
        except ValueError:
            log.warning("static-pools: %s/%s: cannot parse %s=%r", container.pod_name, container.name, ENV_SOCKET,
                        env[ENV_SOCKET])
    pool = env.get(ENV_POOL, pool)
    no_affinity = no_affinity or ENV_NO_AFFINITY in env  # upstream: any value
    if pool == POOL_INFRA:
        socket = -1  # infra is not socket-aware
    return StpRequest(pool=pool, socket=socket, cores=exclusive_cores(container), no_affinity=no_affinity,
                      command=req.command)


# -- the policy --------------------------------------------------------------------------------
class StaticPoolsPolicy(Policy):
    name = "static-pools"
    description = "CMK-compatible pools (exclusive, shared, infra) chosen by STP_POOL or cmk isolate."

    def setup(self) -> None:
        section = self.policy_config.static_pools
        raw, origin = configured_pools(section)
        self.pools = build_pools(raw, self.topology.online, origin)
        if not self.pools:
            raise ConfigError(SECTION, f"no pools configured ({origin} has none)")
        self.label_node, self.taint_node = section.label_node, section.taint_node
        # container id -> (pool, indices of its CPU lists, no affinity)
        self._assigned: dict[str, tuple[str, tuple[int, ...], bool]] = {}
        self._users: dict[tuple[str, int], int] = {}  # (pool, list index) -> containers on it
        log.info("static-pools: pools from %s: %s", origin, ", ".join(
            f"{p.name}{'(exclusive)' if p.exclusive else ''}={format_cpuset(p.cpus)}" for p in self.pools.values()))

    def decide(self, container: ContainerInfo) -> Grant | None:
        req = stp_request(container)
        who = f"{container.namespace}/{container.pod_name}/{container.name}"
        pool = self.pools.get(req.pool)
        if pool is None:
            log.warning("static-pools: %s asks for pool %r, which does not exist (pools: %s); left alone", who,
                        req.pool, ", ".join(self.pools))
            return None
        free = [i for i, cl in enumerate(pool.lists) if (req.socket < 0 or cl.socket == req.socket)
                and not (pool.exclusive and self._users.get((pool.name, i)))]
        where = f" on socket {req.socket}" if req.socket >= 0 else ""
        if pool.exclusive:
            if req.cores < 1:
                log.warning("static-pools: %s is in exclusive pool %s but requests no %s; left alone", who,
                            pool.name, EXCLUSIVE_CORES)
                return None
            num = container.env.get(ENV_NUM_CORES)
            if num is not None and num != str(req.cores):
                log.warning("static-pools: %s: ignoring deprecated %s=%r, the %s request (%d) counts", who,
                            ENV_NUM_CORES, num, EXCLUSIVE_CORES, req.cores)
            if len(free) < req.cores:
                log.warning("static-pools: %s wants %d exclusive cores, pool %s has %d free%s; left alone", who,
                            req.cores, pool.name, len(free), where)
                return None
            chosen = tuple(free[:req.cores])
        else:
            if not free:
                log.warning("static-pools: %s: pool %s has no CPU list%s; left alone", who, pool.name, where)
                return None
            chosen = (min(free, key=lambda i: (self._users.get((pool.name, i), 0), i)),)
        for i in chosen:
            self._users[(pool.name, i)] = self._users.get((pool.name, i), 0) + 1
        cpus = frozenset().union(*(pool.lists[i].cpus for i in chosen))
        self._decided = (pool.name, chosen, req.no_affinity)
        return Grant(pool=pool.name, kind="exclusive" if pool.exclusive else "shared",
                     exclusive=cpus if pool.exclusive else frozenset())

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        # decide() does not know the id its grant is stored under; record the CPU lists here.
        self._decided: tuple[str, tuple[int, ...], bool] | None = None
        super().allocate(cid, container)
        if self._decided is not None:
            self._assigned[cid] = self._decided
            self._decided = None

    def on_release(self, cid: str, grant: Grant) -> None:
        assigned = self._assigned.pop(cid, None)
        if assigned is None:
            return
        pool, chosen, _ = assigned
        for i in chosen:
            left = self._users.get((pool, i), 0) - 1
            if left > 0:
                self._users[(pool, i)] = left
            else:
                self._users.pop((pool, i), None)

    def on_rename(self, old: str, new: str) -> None:
        if old in self._assigned:
            self._assigned[new] = self._assigned.pop(old)

    def _cpus_of(self, cid: str) -> frozenset[int] | None:
        assigned = self._assigned.get(cid)
        if assigned is None:
            return None
        pool = self.pools[assigned[0]]
        return frozenset().union(*(pool.lists[i].cpus for i in assigned[1]))

    def placement(self, cid: str) -> Placement:
        assigned = self._assigned.get(cid)
        if assigned is None or assigned[2]:  # STP_NO_AFFINITY: the workload pins itself
            return (None, None)
        return (self._cpus_of(cid), None)

    def create_edits(self, cid: str) -> ContainerEdits | None:
        assigned = self._assigned.get(cid)
        if assigned is None:
            return None
        env = {ENV_ASSIGNED: self.pools[assigned[0]].text(assigned[1])}
        for name, var in ((POOL_INFRA, ENV_INFRA), (POOL_SHARED, ENV_SHARED)):
            if name in self.pools:
                env[var] = self.pools[name].text()
        container = self.containers.get(cid)
        req = cmk_args_from_command(container.command) if container is not None else None
        return ContainerEdits(env=env, command=list(req.command) if req and req.command is not None else None)

    def node_resources(self) -> dict[str, Any]:
        cores = sum(len(p.lists) for p in self.pools.values() if p.exclusive)
        return {"capacity": {EXCLUSIVE_CORES: str(cores)},
                "labels": {CMK_NODE_LABEL: "true"} if self.label_node else {},
                "taints": [dict(CMK_TAINT)] if self.taint_node else []}

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        return {name: pool.cpus for name, pool in self.pools.items()}

    # -- cache ---------------------------------------------------------------------------------
    def export_extra(self) -> dict[str, Any]:
        return {"static-pools": {cid: {"pool": pool, "cpuLists": [self.pools[pool].lists[i].text for i in chosen],
                                       "noAffinity": no_aff}
                                 for cid, (pool, chosen, no_aff) in self._assigned.items() if cid in self.grants}}

    def restore_extra(self, data: dict[str, Any]) -> None:
        self._assigned, self._users = {}, {}
        cached = data.get("static-pools")
        if not isinstance(cached, dict):
            raise RestoreError("no static-pools assignments in the cache")
        for cid, grant in self.grants.items():
            entry = cached.get(cid)
            pool = self.pools.get(grant.pool)
            if not isinstance(entry, dict) or pool is None or entry.get("pool") != grant.pool:
                raise RestoreError(f"cached pool {grant.pool!r} of {cid} is not configured")
            texts = [cl.text for cl in pool.lists]
            try:
                chosen = tuple(texts.index(str(t)) for t in entry.get("cpuLists", []))
            except ValueError:
                raise RestoreError(f"cached CPU lists {entry.get('cpuLists')} of {cid} are not in pool "
                                   f"{pool.name}") from None
            if not chosen or (pool.exclusive and any(self._users.get((pool.name, i)) for i in chosen)):
                raise RestoreError(f"cached CPU lists of {cid} in pool {pool.name} are empty or taken twice")
            cpus = frozenset().union(*(pool.lists[i].cpus for i in chosen))
            if pool.exclusive != bool(grant.exclusive) or (pool.exclusive and cpus != grant.exclusive):
                raise RestoreError(f"cached grant of {cid} does not match pool {pool.name}'s CPU lists")
            self._assigned[cid] = (pool.name, chosen, bool(entry.get("noAffinity", False)))
            for i in chosen:
                self._users[(pool.name, i)] = self._users.get((pool.name, i), 0) + 1
