"""The node's containers, in one registry, and what the policy placed (as kubelet's cpumanager hands ``state.State``
to its policy).

The resource manager owns one ``NodeState``: every known container with its lifecycle, and for each whether and as
what the policy placed it, with its grant. The policy is handed the state and reads ``placed`` and ``grants``
through it; it writes only through ``place``/``unplace``/``set_grant``/``take_grant``/``rename``. The manager
moves containers through their lifecycle (``register``, ``set_lifecycle``, ``end``, ``forget``). An ended
container (stopped or exited) can hold nothing: ``end`` refuses one still placed and ``place`` refuses an ended one,
so an exited container can never keep its CPUs unnoticed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from resmgr.model.resources import ContainerInfo


class Lifecycle(enum.StrEnum):
    """Where a known container is in its life, as the resource manager last saw it."""

    PENDING = "pending"  # a CreateContainer reservation the runtime has not confirmed (a pending key)
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"
    EXITED = "exited"


ENDED = frozenset({Lifecycle.STOPPED, Lifecycle.EXITED})


class StateError(RuntimeError):
    """A change the state refuses: it would break ``ended containers hold nothing``."""


@dataclass(slots=True, eq=False)
class Record:
    """One known container: its own resources and its lifecycle."""

    info: ContainerInfo
    lifecycle: Lifecycle


class _Known(Mapping[str, ContainerInfo]):
    """Every container the runtime confirmed (pending reservations left out), by id, with its own resources."""

    __slots__ = ("_records",)

    def __init__(self, records: dict[str, Record]) -> None:
        self._records = records

    def __getitem__(self, cid: str) -> ContainerInfo:
        record = self._records[cid]
        if record.lifecycle is Lifecycle.PENDING:
            raise KeyError(cid)
        return record.info

    def get(self, cid: str, default: Any = None) -> Any:
        record = self._records.get(cid)
        return default if record is None or record.lifecycle is Lifecycle.PENDING else record.info

    def __contains__(self, cid: object) -> bool:
        record = self._records.get(cid)  # type: ignore[call-overload]
        return record is not None and record.lifecycle is not Lifecycle.PENDING

    def __iter__(self) -> Iterator[str]:
        return (cid for cid, r in self._records.items() if r.lifecycle is not Lifecycle.PENDING)

    def __len__(self) -> int:
        return sum(1 for r in self._records.values() if r.lifecycle is not Lifecycle.PENDING)

    def items(self) -> Any:
        return [(cid, r.info) for cid, r in self._records.items() if r.lifecycle is not Lifecycle.PENDING]


class NodeState:
    """The one registry of containers. Its columns, by container id, are kept together by its methods only:
    ``_records`` (every known container: its own resources and lifecycle), ``_placed`` (what the policy placed
    the live ones as; a subset of the records, never an ended one) and ``_grants`` (a subset of the placed).
    Placements and grants are plain dicts behind read-only views because the policies look them up on every
    decision (bench-policy's 0.5 ms p99)."""

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._placed: dict[str, ContainerInfo] = {}
        self._grants: dict[str, Any] = {}
        self.placed: Mapping[str, ContainerInfo] = MappingProxyType(self._placed)
        self.known: Mapping[str, ContainerInfo] = _Known(self._records)
        self.grants: Mapping[str, Any] = MappingProxyType(self._grants)

    # -- the manager: lifecycle ------------------------------------------------------------------------------
    def register(self, cid: str, info: ContainerInfo, lifecycle: Lifecycle) -> None:
        """Know ``cid`` (again) with these resources and lifecycle; what it holds stays."""
        record = self._records.get(cid)
        if record is None:
            self._records[cid] = Record(info, lifecycle)
        else:
            record.info = info
            self.set_lifecycle(cid, lifecycle)

    def set_info(self, cid: str, info: ContainerInfo) -> None:
        """``cid``'s own resources changed (a resize, or its undo)."""
        self._records[cid].info = info

    def lifecycle(self, cid: str) -> Lifecycle | None:
        """``cid``'s lifecycle; None: not known."""
        record = self._records.get(cid)
        return None if record is None else record.lifecycle

    def set_lifecycle(self, cid: str, lifecycle: Lifecycle) -> None:
        """Move a known container on (an ended one through ``end``, which checks that it holds nothing)."""
        if lifecycle in ENDED:
            self.end(cid, lifecycle)
        else:
            self._records[cid].lifecycle = lifecycle

    def end(self, cid: str, lifecycle: Lifecycle = Lifecycle.STOPPED) -> None:
        """``cid`` stopped or exited: the policy must have released it first (a stopped container holds nothing)."""
        record = self._records[cid]
        if cid in self._placed or cid in self._grants:
            raise StateError(f"container {cid} {lifecycle} while the policy still holds it")
        record.lifecycle = lifecycle

    def forget(self, cid: str) -> bool:
        """Drop ``cid`` from the registry (removed, gone, a reservation given back); it must hold nothing."""
        record = self._records.get(cid)
        if record is None:
            return False
        if cid in self._placed or cid in self._grants:
            raise StateError(f"container {cid} forgotten while the policy still holds it")
        del self._records[cid]
        return True

    def in_lifecycle(self, *lifecycles: Lifecycle) -> list[str]:
        """Ids of the known containers in one of ``lifecycles``."""
        return [cid for cid, r in self._records.items() if r.lifecycle in lifecycles]

    def holding_nothing(self) -> list[str]:
        """Ids of the confirmed containers the policy holds nothing for (ended ones, and any it could not place)."""
        placed = self._placed
        return [cid for cid, r in self._records.items() if cid not in placed and r.lifecycle is not Lifecycle.PENDING]

    def snapshot(self) -> tuple[dict[str, ContainerInfo], list[str]]:
        """(every confirmed container by id, those holding nothing) in one pass: what the cache saves after every
        decision."""
        placed, pending = self._placed, Lifecycle.PENDING
        known: dict[str, ContainerInfo] = {}
        nothing: list[str] = []
        for cid, r in self._records.items():
            if r.lifecycle is not pending:
                known[cid] = r.info
                if cid not in placed:
                    nothing.append(cid)
        return known, nothing

    def fork(self) -> NodeState:
        """The same containers in the same lifecycles with nothing placed: what a new policy is handed to place
        into, adopted by the manager only if the new policy took it (a config that fails leaves this state)."""
        fresh = NodeState()
        fresh._records.update((cid, Record(r.info, r.lifecycle)) for cid, r in self._records.items())
        return fresh

    # -- the policy: placements and grants -------------------------------------------------------------------
    def place(self, cid: str, container: ContainerInfo) -> None:
        """The policy placed ``cid`` as ``container``; an id the manager never registered is registered as created
        (a policy used on its own)."""
        record = self._records.get(cid)
        if record is None:
            self._records[cid] = Record(container, Lifecycle.CREATED)
        elif record.lifecycle in ENDED:
            raise StateError(f"container {cid} is {record.lifecycle}: it cannot be placed")
        self._placed[cid] = container

    def unplace(self, cid: str) -> None:
        """The policy holds nothing for ``cid`` any more (its grant taken first); the container stays known."""
        self._placed.pop(cid, None)

    def set_grant(self, cid: str, grant: Any) -> None:
        """The policy's grant for a placed container."""
        if cid not in self._placed:
            raise StateError(f"a grant for {cid}, which is not placed")
        self._grants[cid] = grant

    def take_grant(self, cid: str) -> Any:
        """Remove and return ``cid``'s grant (None: it had none)."""
        return self._grants.pop(cid, None)

    def rename(self, old: str, new: str) -> None:
        """A reservation got the runtime's id: the record, its placement and grant move to ``new``."""
        record = self._records.pop(old, None)
        if record is None:
            return
        self._records[new] = record
        self._placed.pop(new, None)
        self._grants.pop(new, None)
        if old in self._placed:
            self._placed[new] = self._placed.pop(old)
        if old in self._grants:
            self._grants[new] = self._grants.pop(old)

    def restore_placements(self, containers: Mapping[str, ContainerInfo], grants: Mapping[str, Any]) -> None:
        """Hold exactly these placements and grants (a restore); others known stay known, holding nothing."""
        self.unplace_all()
        for cid, c in containers.items():
            self.place(cid, c)
        for cid, g in grants.items():
            self.set_grant(cid, g)

    def unplace_all(self) -> None:
        """Hold nothing for anyone (every container is allocated again next)."""
        self._grants.clear()
        self._placed.clear()
