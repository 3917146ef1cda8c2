"""The relay calls the resource manager only through the declared contract (resmgr.relay.hooks), and every
hook implements all of it: no probing with getattr/hasattr, no forwarding through __getattr__."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import resmgr.relay
from resmgr.configplane.hook import AdjustingHook
from resmgr.manager.resource_manager import ResourceManager
from resmgr.relay.hooks import NoopHook, ResourceManagerHook

RELAY = Path(resmgr.relay.__file__).parent
CONTRACT = sorted(name for name, value in vars(ResourceManagerHook).items()
                  if inspect.isfunction(value) and not name.startswith("_"))


def _is_hook(node: ast.expr) -> bool:
    """``hook`` or ``<anything>.hook``: the relay's names for the resource manager."""
    if isinstance(node, ast.Name):
        return node.id == "hook"
    return isinstance(node, ast.Attribute) and node.attr == "hook"


def _relay_trees() -> list[tuple[str, ast.Module]]:
    return [(path.name, ast.parse(path.read_text(), str(path))) for path in sorted(RELAY.glob("*.py"))]


def test_the_contract_is_what_a_front_end_needs() -> None:
    assert CONTRACT == sorted(["before", "after", "failed", "sync_with_runtime", "reconfigure", "keeps_containers",
                               "containers_exited", "runtime_drift", "request_resync", "resync_wanted",
                               "begin_resync"])
    for name in CONTRACT:
        assert (inspect.getdoc(getattr(ResourceManagerHook, name)) or "").count("\n") == 0, name  # one line each


def test_the_relay_never_probes_the_hook() -> None:
    probes = [f"{file}:{node.lineno}" for file, tree in _relay_trees() for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and node.args and _is_hook(node.args[0])]
    assert probes == []


def test_the_relay_uses_nothing_of_the_hook_beyond_the_contract() -> None:
    used = {(file, node.attr) for file, tree in _relay_trees() for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _is_hook(node.value)}
    assert {attr for _, attr in used} - set(CONTRACT) == set(), sorted(used)
    # the contract is used, and by the relay's own calls: the check above looks at something
    assert {"before", "after", "failed", "keeps_containers"} <= {attr for _, attr in used}


def test_no_type_ignore_on_a_hook_call() -> None:
    lines = [f"{path.name}:{n}" for path in sorted(RELAY.glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if "hook." in line and "type: ignore" in line]
    assert lines == []


@pytest.mark.parametrize("cls", [NoopHook, ResourceManager, AdjustingHook], ids=lambda c: c.__name__)
def test_each_hook_implements_the_whole_contract_itself(cls: type) -> None:
    assert "__getattr__" not in vars(cls)
    for name in CONTRACT:
        method = inspect.getattr_static(cls, name, None)
        assert inspect.isfunction(method), f"{cls.__name__} lacks {name}"
        declared = inspect.signature(getattr(ResourceManagerHook, name))
        # every call the contract allows binds to the implementation
        required = [p for p in declared.parameters.values()
                    if p.default is inspect.Parameter.empty and p.name != "self"]
        full = list(declared.parameters.values())[1:]
        signature = inspect.signature(method)
        signature.bind(None, *[None] * len(required))
        signature.bind(None, *[None] * len(full))
