"""Adjustments (``adjustments.criresmgr.intel.com/v1alpha1``): scope matching, conflicts, overrides.

An Adjustment's spec, as in cri-resource-manager::

    scope:                       # the adjustment applies if ANY scope matches
    - nodes: [worker-*]          # node names; a trailing '*' matches a prefix; empty = all nodes
      containers:                # ALL expressions must match; empty = all containers
      - {key: pod/namespace, operator: In, values: [prod]}
    resources: {requests: {cpu: 2, memory: 1Gi}, limits: {cpu: 2}}
    classes: {rdt: gold, blockio: slowread}
    toptierLimit: 2Gi

Everything here is plain functions over plain data so that it can be tested
without a cluster. Two adjustments that both select the same container conflict:
neither is applied to that container, and both report it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resmgr.config import parse_cpu_quantity, parse_memory_quantity
from resmgr.model import expressions
from resmgr.model.expressions import OPERATORS as OPERATORS  # re-exported: one expression language
from resmgr.model.expressions import ContainerView, Expression, ExpressionError
from resmgr.model.expressions import container_view as container_view

SPEC_FIELDS = ("scope", "resources", "classes", "toptierLimit")
RESOURCE_NAMES = ("cpu", "memory")
CLASS_NAMES = ("rdt", "blockio")
# Key under which an adjustment-level problem is reported in status.nodes[NODE].errors.
SPEC_ERROR_KEY = "spec"


class AdjustmentError(ValueError):
    """An Adjustment spec is invalid; ``field`` is the dotted path of the culprit."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"invalid adjustment field {field}: {problem}")


@dataclass(frozen=True)
class Scope:
    nodes: tuple[str, ...] = ()
    containers: tuple[Expression, ...] = ()

    def matches_node(self, node: str) -> bool:
        return not self.nodes or any(node_name_matches(node, pattern) for pattern in self.nodes)

    def matches(self, node: str, container: ContainerView) -> bool:
        return self.matches_node(node) and all(e.matches(container) for e in self.containers)


@dataclass(frozen=True)
class Adjustment:
    """A parsed, validated Adjustment spec."""

    name: str
    scopes: tuple[Scope, ...]
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    classes: Mapping[str, str] = field(default_factory=dict)
    toptier_limit: str | None = None

    def applies_to_node(self, node: str) -> bool:
        return any(s.matches_node(node) for s in self.scopes)

    def selects(self, node: str, container: ContainerView) -> bool:
        return any(s.matches(node, container) for s in self.scopes)


@dataclass(frozen=True)
class ContainerOverride:
    """What an adjustment changes for one container; the resource manager applies it."""

    adjustment: str
    request_milli: int | None = None
    limit_milli: int | None = None
    memory_request: int | None = None
    memory_limit: int | None = None
    classes: Mapping[str, str] = field(default_factory=dict)
    toptier_limit: int | None = None


def node_name_matches(node: str, pattern: str) -> bool:
    """cri-resource-manager's node scope: exact name, or a prefix when the pattern ends in '*'."""
    if pattern.endswith("*"):
        return node.startswith(pattern[:-1])
    return node == pattern


def _string_list(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AdjustmentError(path, f"expected a list of strings, got {value!r}")
    return tuple(value)


def _mapping(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AdjustmentError(path, f"expected a mapping, got {type(value).__name__}")
    return value


def parse_expression(raw: Any, path: str) -> Expression:
    try:
        return expressions.parse_expression(raw, path)
    except ExpressionError as exc:
        raise AdjustmentError(exc.field, exc.problem) from None


def _parse_resources(section: dict[str, Any], path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in section.items():
        field_path = f"{path}.{name}"
        if name not in RESOURCE_NAMES:
            raise AdjustmentError(field_path, f"unsupported resource; supported: {', '.join(RESOURCE_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise AdjustmentError(field_path, f"expected a quantity, got {value!r}")
        try:
            parse_cpu_quantity(str(value)) if name == "cpu" else parse_memory_quantity(value)
        except ValueError as exc:
            raise AdjustmentError(field_path, str(exc)) from None
        out[name] = str(value)
    return out


def parse_adjustment(name: str, spec: Any) -> Adjustment:
    """Validate one Adjustment spec (a mapping, as in the custom resource); raises AdjustmentError."""
    data = _mapping(spec, "spec")
    unknown = sorted(set(data) - set(SPEC_FIELDS))
    if unknown:
        raise AdjustmentError(f"spec.{unknown[0]}", f"unknown field; known fields: {', '.join(SPEC_FIELDS)}")
    raw_scopes = data.get("scope")
    if not isinstance(raw_scopes, list) or not raw_scopes:
        raise AdjustmentError("spec.scope", "at least one scope is required")
    scopes = []
    for i, raw in enumerate(raw_scopes):
        path = f"spec.scope[{i}]"
        scope = _mapping(raw, path)
        extra = sorted(set(scope) - {"nodes", "containers"})
        if extra:
            raise AdjustmentError(f"{path}.{extra[0]}", "unknown field; known fields: nodes, containers")
        nodes = _string_list(scope.get("nodes"), f"{path}.nodes")
        for j, pattern in enumerate(nodes):
            if not pattern or "*" in pattern[:-1]:
                raise AdjustmentError(f"{path}.nodes[{j}]",
                                      f"invalid node name {pattern!r}: only a trailing '*' is allowed")
        raw_exprs = scope.get("containers") or []
        if not isinstance(raw_exprs, list):
            raise AdjustmentError(f"{path}.containers", "expected a list of expressions")
        exprs = tuple(parse_expression(e, f"{path}.containers[{k}]") for k, e in enumerate(raw_exprs))
        scopes.append(Scope(nodes=nodes, containers=exprs))
    resources = _mapping(data.get("resources"), "spec.resources")
    extra = sorted(set(resources) - {"requests", "limits"})
    if extra:
        raise AdjustmentError(f"spec.resources.{extra[0]}", "unknown field; known fields: requests, limits")
    requests = _parse_resources(_mapping(resources.get("requests"), "spec.resources.requests"),
                                "spec.resources.requests")
    limits = _parse_resources(_mapping(resources.get("limits"), "spec.resources.limits"), "spec.resources.limits")
    for res in RESOURCE_NAMES:
        if res in requests and res in limits:
            req, lim = _quantity(res, requests[res]), _quantity(res, limits[res])
            if req > lim:
                raise AdjustmentError(f"spec.resources.requests.{res}",
                                      f"request {requests[res]} is larger than the limit {limits[res]}")
    classes = _mapping(data.get("classes"), "spec.classes")
    for key, value in classes.items():
        if key not in CLASS_NAMES:
            raise AdjustmentError(f"spec.classes.{key}", f"unknown class kind; known: {', '.join(CLASS_NAMES)}")
        if not isinstance(value, str):
            raise AdjustmentError(f"spec.classes.{key}", f"expected a class name, got {value!r}")
    toptier = data.get("toptierLimit")
    if toptier is not None:
        try:
            parse_memory_quantity(toptier)
        except ValueError as exc:
            raise AdjustmentError("spec.toptierLimit", str(exc)) from None
    if not (requests or limits or classes or toptier is not None):
        raise AdjustmentError("spec", "adjusts nothing: give resources, classes or toptierLimit")
    return Adjustment(name=name, scopes=tuple(scopes), requests=requests, limits=limits, classes=dict(classes),
                      toptier_limit=None if toptier is None else str(toptier))


def parse_adjustment_json(name: str, text: str) -> Adjustment:
    """``parse_adjustment`` for the JSON that travels over the config API."""
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise AdjustmentError("spec", f"not valid JSON: {exc}") from None
    return parse_adjustment(name, spec)


def _quantity(resource: str, text: str) -> int:
    return parse_cpu_quantity(text) if resource == "cpu" else parse_memory_quantity(text)


def override_for(adjustment: Adjustment) -> ContainerOverride:
    req, lim = adjustment.requests, adjustment.limits
    return ContainerOverride(
        adjustment=adjustment.name,
        request_milli=_quantity("cpu", req["cpu"]) if "cpu" in req else None,
        limit_milli=_quantity("cpu", lim["cpu"]) if "cpu" in lim else None,
        memory_request=_quantity("memory", req["memory"]) if "memory" in req else None,
        memory_limit=_quantity("memory", lim["memory"]) if "memory" in lim else None,
        classes=dict(adjustment.classes),
        toptier_limit=None if adjustment.toptier_limit is None else parse_memory_quantity(adjustment.toptier_limit),
    )


@dataclass
class AdjustmentOutcome:
    """Per adjustment: a spec error, or the containers it applies to and per-container errors."""

    error: str = ""
    applied: list[str] = field(default_factory=list)  # container ids
    container_errors: dict[str, str] = field(default_factory=dict)  # pretty container name -> error


@dataclass
class AdjustmentPlan:
    overrides: dict[str, ContainerOverride]  # container id -> override
    outcomes: dict[str, AdjustmentOutcome]


def plan_adjustments(node: str, specs: Mapping[str, Any], containers: Iterable[ContainerView]) -> AdjustmentPlan:
    """Decide which override each container gets. ``specs`` maps name -> spec (mapping or JSON text)."""
    outcomes: dict[str, AdjustmentOutcome] = {}
    valid: list[Adjustment] = []
    for name in sorted(specs):
        spec = specs[name]
        try:
            adj = parse_adjustment_json(name, spec) if isinstance(spec, str) else parse_adjustment(name, spec)
        except AdjustmentError as exc:
            outcomes[name] = AdjustmentOutcome(error=str(exc))
            continue
        outcomes[name] = AdjustmentOutcome()
        if adj.applies_to_node(node):
            valid.append(adj)
    overrides: dict[str, ContainerOverride] = {}
    for container in containers:
        matching = [a for a in valid if a.selects(node, container)]
        if len(matching) == 1:
            overrides[container.id] = override_for(matching[0])
            outcomes[matching[0].name].applied.append(container.id)
        elif len(matching) > 1:
            names = [a.name for a in matching]
            for adj in matching:
                others = ", ".join(n for n in names if n != adj.name)
                outcomes[adj.name].container_errors[container.pretty] = (
                    f"conflicts with adjustment {others}: more than one adjustment selects this container; "
                    "none of them is applied to it")
    return AdjustmentPlan(overrides=overrides, outcomes=outcomes)
