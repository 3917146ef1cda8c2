"""resmgr's packages form layers: every import points down the declared order, so no two packages loop.

The imports are read with ``ast`` from the source, function-level and ``TYPE_CHECKING`` imports included:
a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Lowest first. A unit is a subpackage of resmgr or one of its top-level modules ("resmgr" is the package's
# own __init__). A unit may import only units on a strictly lower layer: units on one layer stay independent.
LAYERS: list[set[str]] = [
    {"resmgr", "durations"},
    {"options"},
    {"logsetup", "topology", "proto", "rpc", "webhook_http"},  # webhook_http: shared with admission/
    {"config"},
    {"model"},  # pods, containers, expressions, the annotation budget
    {"policy", "control", "relay"},  # relay/hooks.py is the contract the manager implements
    {"manager"},
    {"configplane", "webhook", "nri"},  # nri: the NRI front end, beside the relay's consumers
    {"agent"},
    {"cli"},
    {"launch"},
]
LEVEL = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def _units(root: Path) -> set[str]:
    pkg = root / "resmgr"
    return ({p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
            | {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"} | {"resmgr"})


def _unit_of(module: str, units: set[str]) -> str | None:
    parts = module.split(".")
    if parts[0] != "resmgr":
        return None
    if len(parts) == 1 or parts[1] not in units:  # `from resmgr import __version__`
        return "resmgr"
    return parts[1]


def imports(root: Path) -> Iterator[tuple[str, str, str]]:
    """(importing unit, imported unit, file) for every import between two different units of resmgr."""
    units = _units(root)
    for path in sorted((root / "resmgr").rglob("*.py")):
        rel = path.relative_to(root)
        module = ".".join(rel.with_suffix("").parts)
        package = module.removesuffix(".__init__") if path.name == "__init__.py" else module.rpartition(".")[0]
        source = _unit_of(module.removesuffix(".__init__"), units)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # `from resmgr import policy` imports the subpackage, `from resmgr import x` an attribute
                targets = [f"{base}.{alias.name}" for alias in node.names] if base == "resmgr" else [base]
            for target in targets:
                unit = _unit_of(target, units)
                if unit is not None and unit != source:
                    yield source or "resmgr", unit, str(rel)


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Each strongly connected set of more than one unit (Tarjan), sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def violations(root: Path) -> list[str]:
    """Everything wrong with the layering of the tree at ``root``: unplaced units, loops, upward imports."""
    problems = [f"resmgr unit {u!r} has no layer in LAYERS" for u in sorted(_units(root) - LEVEL.keys())]
    found = list(imports(root))
    problems += [f"package loop: {' <-> '.join(c)}" for c in cycles({(a, b) for a, b, _ in found})]
    problems += [f"{where}: {a} (layer {LEVEL[a]}) imports {b} (layer {LEVEL[b]})"
                 for a, b, where in found if a in LEVEL and b in LEVEL and LEVEL[b] >= LEVEL[a]]
    return sorted(set(problems))


def test_resmgr_imports_point_down_the_layers() -> None:
    assert violations(REPO) == []


def test_the_check_sees_a_loop_and_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "resmgr"
    for name in ("model", "policy"):
        (pkg / name).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "__init__.py").write_text("")
    (pkg / "policy" / "__init__.py").write_text("from ..model import x\n")
    # a function-level import counts as much as one at the top
    (pkg / "model" / "m.py").write_text("def f():\n    from resmgr.policy import y\n")
    (pkg / "options.py").write_text("import resmgr.policy.base\n")
    assert violations(tmp_path) == [
        "package loop: model <-> policy",
        "resmgr/model/m.py: model (layer 4) imports policy (layer 5)",
        "resmgr/options.py: options (layer 1) imports policy (layer 5)",
    ]


# A policy's placements are its own (in resmgr.model.state.NodeState, written by the policy through it): nothing
# outside resmgr/policy assigns, deletes or mutates ``<policy>.containers``/``<policy>.grants``, and the manager
# calls the policy's declared methods instead of probing it with getattr.
_MUTATORS = {"clear", "pop", "popitem", "update", "setdefault", "__setitem__", "__delitem__"}


def _on_policy(node: ast.AST) -> bool:
    """``node`` is ``<something naming a policy>.containers`` or ``.grants``."""
    return (isinstance(node, ast.Attribute) and node.attr in ("containers", "grants")
            and "policy" in ast.unparse(node.value).lower())


def policy_state_intrusions(root: Path) -> list[str]:
    """Places outside resmgr/policy that change a policy's containers/grants, or getattr a policy in the manager."""
    found: list[tuple[str, int, str]] = []
    for path in sorted((root / "resmgr").rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[1] == "policy":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign | ast.Delete):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            hit = any(_on_policy(t) or (isinstance(t, ast.Subscript) and _on_policy(t.value)) for t in targets)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                hit |= node.func.attr in _MUTATORS and _on_policy(node.func.value)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and rel.parts[1] == "manager" and node.args and "policy" in ast.unparse(node.args[0]).lower()):
                hit = True
            if hit:
                found.append((str(rel), node.lineno, ast.unparse(node)[:80]))
    return [f"{rel}:{line}: {text}" for rel, line, text in sorted(found)]


def test_nothing_outside_a_policy_changes_its_placements_or_probes_it() -> None:
    assert policy_state_intrusions(REPO) == []


def test_the_placement_check_sees_each_kind_of_intrusion(tmp_path: Path) -> None:
    (tmp_path / "resmgr" / "manager").mkdir(parents=True)
    (tmp_path / "resmgr" / "policy").mkdir(parents=True)
    (tmp_path / "resmgr" / "policy" / "base.py").write_text("self.policy.grants.clear()\n")  # a policy's own
    (tmp_path / "resmgr" / "manager" / "m.py").write_text(
        "self.policy.containers.clear()\npolicy.grants = {}\ndel rm.policy.grants[k]\n"
        "getattr(self.policy, 'cold_starts', None)\nself.containers.clear()\n")
    assert [line.split(": ")[0] for line in policy_state_intrusions(tmp_path)] == [
        "resmgr/manager/m.py:1", "resmgr/manager/m.py:2", "resmgr/manager/m.py:3", "resmgr/manager/m.py:4"]


# One registry of containers (resmgr.model.state.NodeState): nothing else declares a mapping of containers as a
# field, neither the manager ("every known container") nor a policy's state ("the placed ones"); a policy class
# changes its placements only through the state's methods, never by writing ``self.containers``/``self.grants``.
_CONTAINER_MAP = re.compile(r"^(dict|Dict|MutableMapping)\[str, *ContainerInfo\]$")
_REGISTRY = Path("resmgr/model/state.py")


def _policy_class(node: ast.ClassDef) -> bool:
    return any("Policy" in ast.unparse(b) for b in node.bases) or node.name == "Policy"


def container_registries(root: Path) -> list[str]:
    """Fields outside the registry that hold containers by id, and writes of a policy's placements in a policy."""
    found: list[str] = []
    for path in sorted((root / "resmgr").rglob("*.py")):
        rel = path.relative_to(root)
        tree = ast.parse(path.read_text(), str(path))
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            for node in ast.walk(cls):
                if rel == _REGISTRY:
                    break
                if isinstance(node, ast.AnnAssign) and _CONTAINER_MAP.match(ast.unparse(node.annotation)) and (
                        isinstance(node.target, ast.Attribute) or node in cls.body):
                    found.append(f"{rel}:{node.lineno}: a second container registry: {ast.unparse(node)[:60]}")
            if rel.parts[1] != "policy" or not _policy_class(cls):
                continue
            for node in ast.walk(cls):
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign | ast.Delete):
                    targets = list(node.targets)
                elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                    targets = [node.target]
                targets = [t.value if isinstance(t, ast.Subscript) else t for t in targets]
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
                    targets.append(node.func.value)
                if any(ast.unparse(t) in ("self.containers", "self.grants") for t in targets):
                    found.append(f"{rel}:{node.lineno}: a policy writes its placements past its state: "
                                 f"{ast.unparse(node)[:60]}")
    return sorted(found)


def test_one_registry_of_containers_and_policies_write_through_their_state() -> None:
    assert container_registries(REPO) == []


def test_the_registry_check_sees_a_second_registry_and_a_write_past_the_state(tmp_path: Path) -> None:
    (tmp_path / "resmgr" / "manager").mkdir(parents=True)
    (tmp_path / "resmgr" / "policy").mkdir(parents=True)
    (tmp_path / "resmgr" / "model").mkdir(parents=True)
    (tmp_path / "resmgr" / "model" / "state.py").write_text(
        "class NodeState:\n    _records: dict[str, ContainerInfo]\n")  # the registry itself
    (tmp_path / "resmgr" / "manager" / "m.py").write_text(
        "class RM:\n    containers: dict[str, ContainerInfo]\n    def __init__(self):\n"
        "        self.known: dict[str, ContainerInfo] = {}\n        live: dict[str, ContainerInfo] = {}\n")
    (tmp_path / "resmgr" / "policy" / "p.py").write_text(
        "class P(Policy):\n    def allocate(self, cid, c):\n        self.containers[cid] = c\n"
        "        self.grants.pop(cid)\n        self.state.place(cid, c)\n"
        "class Memory:\n    def f(self):\n        self.grants[1] = 2\n")  # not a policy: its own grants
    assert [line.split(": ")[0] for line in container_registries(tmp_path)] == [
        "resmgr/manager/m.py:2", "resmgr/manager/m.py:4", "resmgr/policy/p.py:3", "resmgr/policy/p.py:4"]


# resmgr/control takes its config as the typed sections of resmgr.config.sections: no field of the cpu, rdt,
# blockio or resource-manager sections is read out of a mapping by its name there (the schema checked those
# fields; the sections carry them typed).
def _field_names(spec: object, out: set[str]) -> set[str]:
    from resmgr.config import validation as v

    if isinstance(spec, v.Struct):
        out |= set(spec.fields)
        for inner in spec.fields.values():
            _field_names(inner, out)
    for attr in ("value", "item", "inner"):
        inner = getattr(spec, attr, None)
        if isinstance(inner, v.Spec):
            _field_names(inner, out)
    for inner in getattr(spec, "specs", ()):
        _field_names(inner, out)
    return out


def raw_config_reads(root: Path) -> list[str]:
    """``x.get("<field>")`` and ``x["<field>"]`` in resmgr/control for a field of the controllers' sections."""
    from resmgr.config import schema

    names: set[str] = set()
    for spec in (schema.RESOURCE_MANAGER, schema.CPU, schema.RDT, schema.BLOCKIO):
        _field_names(spec, names)
    found: list[str] = []
    for path in sorted((root / "resmgr" / "control").rglob("*.py")):
        rel = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            key: ast.AST | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args:
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            if isinstance(key, ast.Constant) and key.value in names:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:70]}")
    return sorted(found)


def test_control_reads_typed_sections_not_raw_config_mappings() -> None:
    assert raw_config_reads(REPO) == []


def test_the_raw_read_check_sees_gets_and_subscripts(tmp_path: Path) -> None:
    (tmp_path / "resmgr" / "control").mkdir(parents=True)
    (tmp_path / "resmgr" / "control" / "c.py").write_text(
        "a = section.get('Classes', {})\nb = p['Weight']\nc = raw.get('all')\nd = section.classes\n"
        "e = config.get('resource-manager', {}).get('control', {})\n")
    assert [line.split(": ")[0] for line in raw_config_reads(tmp_path)] == [
        "resmgr/control/c.py:1", "resmgr/control/c.py:2", "resmgr/control/c.py:5"]


if __name__ == "__main__":  # python test/unit/test_layering.py [ROOT]: the check on another tree
    problems = violations(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO)
    print("\n".join(problems) or "layering ok")
    sys.exit(1 if problems else 0)
