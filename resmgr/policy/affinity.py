"""Container affinity and anti-affinity for topology-aware (upstream's docs/policy/container-affinity.md).

A pod annotates its containers with affinities::

    cri-resource-manager.intel.com/affinity: |
      web:
      - scope: {key: pod/namespace, operator: Equals, values: [shop]}   # default: this pod
        match: {key: name, operator: Equals, values: [cache]}
        weight: 5                                                          # default 1
    cri-resource-manager.intel.com/anti-affinity: |
      web: [logger]                      # shorthand: containers of this pod, weight 1, symmetric

For a container C being placed, every affinity of C adds its weight to each other
container in its scope that its match selects (anti-affinities subtract). The
weights are summed per pool of the tree where those containers run (a reserved
container counts at the root), and a pool's score is its own sum plus the sums
of every pool above and below it, damped by 0.75 per tree level. Pools are then
tried in order of score first, before depth and free capacity, so C lands close
to what it likes and away from what it dislikes when it fits there.

``ColocatePods`` and ``ColocateNamespaces`` are upstream's implicit affinities
(weight 10 to the rest of the pod or namespace) for containers without explicit
ones. Upstream's third implicit affinity pulls AVX-512 users together by a tag
that its eBPF collector sets; we have no such collector, so it would match no
container and is left out.

Differs from upstream: the default (pod) scope is the pod's namespace and name,
where upstream compares the pod name only and so also reaches same-named pods in
other namespaces; an invalid annotation is logged and ignored (the container is
placed without affinities) where upstream refuses to create the container.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resmgr.config import ConfigError
from resmgr.config import _load_yaml as load_bounded_yaml  # the bounded strict loader configs use
from resmgr.model.expressions import (
    ContainerView,
    Expression,
    ExpressionError,
    container_view,
    key_value,
    parse_expression,
)
from resmgr.model.resources import RESMGR_KEY_NAMESPACE, ContainerInfo

log = logging.getLogger("resmgr.policy.affinity")

AFFINITY_KEY = f"{RESMGR_KEY_NAMESPACE}/affinity"
ANTI_AFFINITY_KEY = f"{RESMGR_KEY_NAMESPACE}/anti-affinity"
WEIGHT_CUTOFF = 1000
DEFAULT_WEIGHT = 1
COLOCATION_WEIGHT = 10
DISTANCE_FACTOR = 0.75  # how much an affinity weakens per tree level between pools
ALWAYS = Expression(key="", operator="AlwaysTrue")


class AffinityError(ValueError):
    """An affinity annotation is invalid."""


@dataclass(frozen=True)
class Affinity:
    scope: Expression  # the containers this affinity is evaluated against
    match: Expression  # those of them it applies to
    weight: int  # > 0 pulls, < 0 pushes

    def __str__(self) -> str:
        kind = "anti-affinity" if self.weight < 0 else "affinity"
        return f"<{kind}: scope {self.scope} {self.match} => {self.weight}>"


def pod_scope(namespace: str, pod_name: str) -> Expression:
    return Expression(key=":pod/namespace:pod/name", operator="Equals", values=(f"{namespace}:{pod_name}",))


def _parse_simple(data: Any, weight: int, scope: Expression) -> dict[str, list[Affinity]] | None:
    """The shorthand ``name: [other, ...]``, made symmetric as upstream does; None if not that form."""
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and all(isinstance(o, str) for o in v) for v in data.values()):
        return None
    symmetric: dict[str, set[str]] = {}
    for name, others in data.items():
        for other in others:
            symmetric.setdefault(str(name), set()).add(other)
            symmetric.setdefault(other, set()).add(str(name))
    out: dict[str, list[Affinity]] = {}
    for name, others in symmetric.items():
        values = tuple(sorted(others))
        match = Expression("name", "Equals" if len(values) == 1 else "In", values)  # upstream: the name label
        out[name] = [Affinity(scope=scope, match=match, weight=weight)]
    return out


def _parse_full(data: Any, weight: int, scope: Expression, key: str) -> dict[str, list[Affinity]]:
    if not isinstance(data, dict):
        raise AffinityError(f"{key}: expected a mapping of container name to affinities")
    out: dict[str, list[Affinity]] = {}
    for name, entries in data.items():
        if not isinstance(entries, list):
            raise AffinityError(f"{key}: {name}: expected a list of affinities")
        for i, raw in enumerate(entries):
            path = f"{key}: {name}[{i}]"
            if not isinstance(raw, dict):
                raise AffinityError(f"{path}: expected a mapping with scope, match and weight")
            unknown = sorted(set(raw) - {"scope", "match", "weight"})
            if unknown:
                raise AffinityError(f"{path}.{unknown[0]}: unknown field; known fields: scope, match, weight")
            if raw.get("match") is None:
                raise AffinityError(f"{path}.match: an affinity needs a match expression")
            try:
                match = parse_expression(raw["match"], f"{path}.match")
                where = scope if raw.get("scope") is None else parse_expression(raw["scope"], f"{path}.scope")
            except ExpressionError as exc:
                raise AffinityError(str(exc)) from None
            w = raw.get("weight") or 0
            if isinstance(w, bool) or not isinstance(w, int):
                raise AffinityError(f"{path}.weight: expected an integer, got {w!r}")
            # As upstream: a missing weight is the default; an anti-affinity's weight is negated.
            w = weight if w == 0 else (-w if weight < 0 else w)
            w = max(-WEIGHT_CUTOFF, min(WEIGHT_CUTOFF, w))
            out.setdefault(str(name), []).append(Affinity(scope=where, match=match, weight=w))
    return out


def parse_affinities(value: str, *, anti: bool, namespace: str, pod_name: str) -> dict[str, list[Affinity]]:
    """One affinity or anti-affinity annotation: container name -> affinities; raises AffinityError."""
    key = ANTI_AFFINITY_KEY if anti else AFFINITY_KEY
    try:
        data = load_bounded_yaml(value, key, "pod annotation")
    except ConfigError as exc:
        raise AffinityError(str(exc)) from None
    weight = -DEFAULT_WEIGHT if anti else DEFAULT_WEIGHT
    scope = pod_scope(namespace, pod_name)
    simple = _parse_simple(data, weight, scope)
    return simple if simple is not None else _parse_full(data, weight, scope, key)


@functools.lru_cache(maxsize=4096)
def _pod_affinities(affinity: str | None, anti: str | None, namespace: str,
                    pod_name: str) -> Mapping[str, tuple[Affinity, ...]]:
    out: dict[str, list[Affinity]] = {}
    try:
        for value, is_anti in ((affinity, False), (anti, True)):
            if value is not None:
                for name, found in parse_affinities(value, anti=is_anti, namespace=namespace,
                                                    pod_name=pod_name).items():
                    out.setdefault(name, []).extend(found)
    except AffinityError as exc:
        log.error("pod %s/%s: ignoring its container affinities: %s", namespace, pod_name, exc)
        return {}
    return {name: tuple(found) for name, found in out.items()}


def explicit_affinities(c: ContainerInfo) -> tuple[Affinity, ...]:
    """The affinities c's pod annotates for it (parsed once per distinct annotation)."""
    notes = c.pod_annotations
    if AFFINITY_KEY not in notes and ANTI_AFFINITY_KEY not in notes:
        return ()
    return _pod_affinities(notes.get(AFFINITY_KEY), notes.get(ANTI_AFFINITY_KEY), c.namespace,
                           c.pod_name).get(c.name, ())


def container_affinities(c: ContainerInfo, *, colocate_pods: bool = False,
                         colocate_namespaces: bool = False) -> tuple[Affinity, ...]:
    """Explicit affinities, or else the implicit co-location ones the options turn on."""
    explicit = explicit_affinities(c)
    if explicit:
        return explicit
    implicit = []
    if colocate_pods:
        implicit.append(Affinity(scope=pod_scope(c.namespace, c.pod_name), match=ALWAYS, weight=COLOCATION_WEIGHT))
    if colocate_namespaces:
        implicit.append(Affinity(scope=ALWAYS, match=Expression("namespace", "Equals", (c.namespace,)),
                                 weight=COLOCATION_WEIGHT))
    return tuple(implicit)


class AffinityScorer:
    """Turns a container's affinities into the placed containers they select.

    It keeps one expression view per placed container and, for each key an ``Equals``/``In``
    expression has asked about, an index value -> container ids, kept in step with the placed
    containers; such expressions (the pod scope, co-location) then cost a lookup instead of a
    pass over every container."""

    def __init__(self) -> None:
        self._views: dict[str, tuple[ContainerInfo, ContainerView]] = {}
        self._index: dict[str, dict[str | None, set[str]]] = {}

    def _sync(self, containers: Mapping[str, ContainerInfo], placed: Mapping[str, Any]) -> None:
        views = self._views
        gone = [cid for cid, (info, _) in views.items() if cid not in placed or containers.get(cid) is not info]
        for cid in gone:
            _, view = views.pop(cid)
            for key, table in self._index.items():
                table.get(key_value(view, key), set()).discard(cid)
        for cid in placed.keys() - views.keys():
            info = containers.get(cid)
            if info is None:
                continue
            view = container_view(info)
            views[cid] = (info, view)
            for key, table in self._index.items():
                table.setdefault(key_value(view, key), set()).add(cid)

    def _selected(self, e: Expression) -> set[str] | None:
        """The ids an Equals/In expression selects, from the index; None if it cannot be looked up."""
        if e.operator not in ("Equals", "In") or "*" in e.values:
            return None
        table = self._index.get(e.key)
        if table is None:
            table = self._index[e.key] = {}
            for cid, (_, view) in self._views.items():
                table.setdefault(key_value(view, e.key), set()).add(cid)
        out: set[str] = set()
        for value in e.values:
            out |= table.get(value, set())
        return out

    def container_weights(self, affinities: tuple[Affinity, ...], containers: Mapping[str, ContainerInfo],
                          placed: Mapping[str, Any], exclude: ContainerInfo) -> dict[str, int]:
        """Other placed container id -> summed weight of the affinities that select it."""
        self._sync(containers, placed)
        views = self._views
        weights: dict[str, int] = {}
        for a in affinities:
            candidates: set[str] | None = None
            checks = []
            for e in (a.scope, a.match):
                if e.operator == "AlwaysTrue":
                    continue
                found = self._selected(e)
                if found is None:
                    checks.append(e.matches)
                else:
                    candidates = found if candidates is None else candidates & found
            for cid in (views if candidates is None else candidates):
                info, view = views[cid]
                if info is not exclude and all(check(view) for check in checks):  # no self-affinity
                    weights[cid] = weights.get(cid, 0) + a.weight
        return weights


def pool_scores(pool_weights: Mapping[str, int], pools: Mapping[str, Any]) -> dict[str, float]:
    """Each pool's affinity score: its own weight plus those of the pools above and below it,
    multiplied by 0.75 per level of distance (upstream's affinityScore)."""
    scores: dict[str, float] = {}
    for name, pool in pools.items():
        score = 0.0
        q = DISTANCE_FACTOR
        for ancestor in pool.ancestors:  # nearest first
            score += q * pool_weights.get(ancestor.name, 0)
            q *= DISTANCE_FACTOR
        for below in pool.subtree:  # includes the pool itself
            w = pool_weights.get(below.name, 0)
            if w:
                score += DISTANCE_FACTOR ** (below.depth - pool.depth) * w
        scores[name] = score
    return scores
