"""State journal: backups, checksums, write-ahead recording, byte-for-byte restore (on a tmp host root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from installer.host import CommandRunner, Host
from installer.journal import STATE_FILE, Journal, JournalError

ORIGINAL = b"KUBELET_EXTRA_ARGS=\"--v=2\"\n# odd bytes: \xff\x00 no trailing newline"


@pytest.fixture
def host(tmp_path: Path) -> Host:
    (tmp_path / "etc").mkdir()
    (tmp_path / "var/lib").mkdir(parents=True)
    return Host(tmp_path, CommandRunner())


def write(host: Host, path: str, data: bytes, mode: int = 0o640) -> None:
    target = host.root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    os.chmod(target, mode)


def test_existing_file_is_backed_up_and_restored_byte_for_byte_with_its_mode(host: Host) -> None:
    write(host, "/etc/a.env", ORIGINAL, 0o640)
    j = Journal.load(host)
    assert j.put_file("/etc/a.env", b"new\n", group="kubelet") is True
    assert host.read_bytes("/etc/a.env") == b"new\n" and host.mode("/etc/a.env") == 0o640
    # The record survives a reload (it is on the node, not in memory).
    j = Journal.load(host)
    assert j.files["/etc/a.env"].existed and j.files["/etc/a.env"].backup
    assert j.put_file("/etc/a.env", b"new\n", group="kubelet") is False  # idempotent
    assert j.restore_group("kubelet") == ["/etc/a.env"]
    assert host.read_bytes("/etc/a.env") == ORIGINAL and host.mode("/etc/a.env") == 0o640
    assert not j.files


def test_created_file_and_dirs_are_removed(host: Host) -> None:
    j = Journal.load(host)
    j.ensure_dir("/opt/x/bin")
    j.put_file("/opt/x/bin/tool", b"#!/bin/sh\n", group="resmgr", mode=0o755)
    assert host.mode("/opt/x/bin/tool") == 0o755
    j.restore_file("/opt/x/bin/tool")
    j.remove_dirs()
    assert not host.exists("/opt/x") and host.exists("/opt") is False
    j.clear()
    assert not host.exists(STATE_FILE)


def test_directory_we_did_not_create_is_kept_and_non_empty_dir_left(host: Host) -> None:
    j = Journal.load(host)
    j.ensure_dir("/etc/mine")
    write(host, "/etc/mine/someone-elses", b"x")
    j.remove_dirs()
    assert host.exists("/etc/mine/someone-elses") and host.exists("/etc")
    with pytest.raises(JournalError, match="refusing to drop the journal"):
        j.clear()


def test_kill_between_journal_and_write_converges(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    write(host, "/etc/a.env", ORIGINAL)
    j = Journal.load(host)

    def crash(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt("simulated kill after the journal was saved")

    real_write = host.write_atomic
    monkeypatch.setattr(host, "write_atomic",
                        lambda p, d, m=0o644: crash() if p == "/etc/a.env" else real_write(p, d, m))
    with pytest.raises(KeyboardInterrupt):
        j.put_file("/etc/a.env", b"new\n", group="kubelet")
    monkeypatch.undo()
    assert host.read_bytes("/etc/a.env") == ORIGINAL
    j = Journal.load(host)  # a fresh process
    assert j.put_file("/etc/a.env", b"new\n", group="kubelet") is True
    j.restore_group("kubelet")
    assert host.read_bytes("/etc/a.env") == ORIGINAL


def test_kill_after_write_before_anything_else_is_still_recognised_as_ours(host: Host) -> None:
    write(host, "/etc/a.env", ORIGINAL)
    j = Journal.load(host)
    j.put_file("/etc/a.env", b"v1\n", group="kubelet")
    # A second change: journal records v2 as ours first; the file already has it (write done, then killed).
    j.files["/etc/a.env"].ours.append(__import__("hashlib").sha256(b"v2\n").hexdigest())
    j.save()
    write(host, "/etc/a.env", b"v2\n")
    j = Journal.load(host)
    assert j.put_file("/etc/a.env", b"v2\n", group="kubelet") is False
    j.restore_group("kubelet")
    assert host.read_bytes("/etc/a.env") == ORIGINAL


def test_owner_rewrite_becomes_the_new_original(host: Host) -> None:
    write(host, "/etc/a.env", ORIGINAL)
    j = Journal.load(host)
    j.put_file("/etc/a.env", b"ours\n", group="kubelet")
    write(host, "/etc/a.env", b"owner v2\n")  # e.g. gardener-node-agent rewrote it
    assert j.put_file("/etc/a.env", b"ours again\n", group="kubelet") is True
    j.restore_group("kubelet")
    assert host.read_bytes("/etc/a.env") == b"owner v2\n"


def test_restore_leaves_content_the_installer_did_not_write(host: Host) -> None:
    j = Journal.load(host)
    j.put_file("/etc/created", b"ours\n", group="resmgr")
    write(host, "/etc/created", b"someone else's\n")
    assert j.restore_file("/etc/created") is False
    assert host.read_bytes("/etc/created") == b"someone else's\n"


def test_corrupt_backup_refuses_to_restore_and_changes_nothing(host: Host) -> None:
    write(host, "/etc/a.env", ORIGINAL)
    j = Journal.load(host)
    j.put_file("/etc/a.env", b"ours\n", group="kubelet")
    write(host, j.files["/etc/a.env"].backup, b"garbage")
    with pytest.raises(JournalError, match="does not match"):
        j.restore_file("/etc/a.env")
    assert host.read_bytes("/etc/a.env") == b"ours\n"
    assert "/etc/a.env" in Journal.load(host).files


def test_unreadable_state_file_is_a_clear_error(host: Host) -> None:
    write(host, STATE_FILE, b"{not json")
    with pytest.raises(JournalError, match="unreadable"):
        Journal.load(host)


def test_paths_resolve_absolute_symlinks_inside_the_host_root(host: Host) -> None:
    (host.root / "run").mkdir()
    (host.root / "var/run").symlink_to("/run")  # absolute, as on Debian
    assert host.path("/var/run/cri-resmgr/x.sock") == host.root / "run/cri-resmgr/x.sock"
    (host.root / "etc/loop").symlink_to("/etc/loop")
    with pytest.raises(OSError, match="too many symlinks"):
        host.path("/etc/loop/x")
