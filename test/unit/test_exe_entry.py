"""hacks/exe_entry.py: the one-file build's entry runs PyInstaller's deferred runtime hooks for every command
but the relay."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ENTRY = Path(__file__).resolve().parents[2] / "hacks" / "exe_entry.py"


@pytest.fixture()
def exe_entry():
    spec = importlib.util.spec_from_file_location("exe_entry_under_test", ENTRY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_bundle(tmp_path: Path, exe_entry, log: Path) -> Path:
    """A bundle whose deferred hooks append their name to ``log`` (and check they run as __main__ does)."""
    hooks = tmp_path / "bundle" / exe_entry.DEFERRED_RTHOOKS_DIR
    hooks.mkdir(parents=True)
    for name in exe_entry.DEFERRED_RTHOOKS:
        (hooks / f"{name}.py").write_text(
            f"assert __name__ == '__main__'\nwith open({str(log)!r}, 'a') as f:\n    f.write('{name}\\n')\n")
    return hooks.parent


def test_deferred_hooks_run_in_order(tmp_path, exe_entry):
    log = tmp_path / "ran"
    bundle = fake_bundle(tmp_path, exe_entry, log)
    assert exe_entry.run_deferred_rthooks(str(bundle)) == list(exe_entry.DEFERRED_RTHOOKS)
    assert log.read_text().split() == list(exe_entry.DEFERRED_RTHOOKS)


def test_missing_hooks_are_skipped(tmp_path, exe_entry):
    assert exe_entry.run_deferred_rthooks(str(tmp_path)) == []


@pytest.mark.parametrize("command, runs_hooks", [
    ("cri-resmgr", False),
    ("cri-resmgr-agent", True),
    ("cri-resmgr-installer", True),
    ("gardener-extension-cri-resmgr", True),
    ("gardener-extension-admission-cri-resmgr", True),
])
def test_only_the_relay_starts_without_the_hooks(tmp_path, exe_entry, monkeypatch, command, runs_hooks):
    log = tmp_path / "ran"
    bundle = fake_bundle(tmp_path, exe_entry, log)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    monkeypatch.setattr(sys, "argv", ["/opt/cri-resmgr/bin/cri-resmgr", command, "--help"])
    called = []
    monkeypatch.setitem(exe_entry.COMMANDS, command, lambda: lambda: called.append(sys.argv) or 0)
    assert exe_entry.main() == 0
    assert called == [[command, "--help"]]
    assert (log.read_text().split() if log.exists() else []) == (list(exe_entry.DEFERRED_RTHOOKS) if runs_hooks
                                                                  else [])


def test_not_frozen_runs_no_hooks(tmp_path, exe_entry, monkeypatch):
    monkeypatch.delattr(sys, "_MEIPASS", raising=False)
    monkeypatch.setattr(sys, "argv", ["cri-resmgr-agent"])
    monkeypatch.setitem(exe_entry.COMMANDS, "cri-resmgr-agent", lambda: lambda: 0)
    monkeypatch.setattr(exe_entry, "run_deferred_rthooks", lambda bundle: pytest.fail("ran hooks unfrozen"))
    assert exe_entry.main() == 0
