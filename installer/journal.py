"""State journal: every change the installer makes on the node, with backups and checksums.

Lives in ``/var/lib/cri-resmgr-installer/`` on the node: ``state.json`` plus ``backup/``.

Protocol for changing a file (write-ahead, so a kill at any instant leaves a state a re-run
understands):

1. First time a path is touched, back up the original bytes (checksum verified) and record
   ``existed``/``orig_sha256``/``orig_mode`` *before* anything is modified.
2. Add the checksum of the new content to ``ours`` and save the journal.
3. Write the file atomically.

On a re-run, content whose checksum is in ``ours`` is known to be ours. Content that is neither
ours nor the recorded original was rewritten by its owner (for example gardener-node-agent):
that becomes the new original, backed up again, so restore gives back what the owner last wrote.
Restore only reverts content that is ours; a foreign rewrite is left alone and logged.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from installer import failpoints
from installer.host import Host, sha256_bytes

log = logging.getLogger("installer.journal")

STATE_DIR = "/var/lib/cri-resmgr-installer"
STATE_FILE = f"{STATE_DIR}/state.json"
BACKUP_DIR = f"{STATE_DIR}/backup"
FORMAT_VERSION = 1


class JournalError(RuntimeError):
    """The journal or one of its backups is unusable; nothing was changed."""


@dataclass
class FileRecord:
    path: str
    group: str
    existed: bool
    orig_sha256: str | None = None
    orig_mode: int | None = None
    backup: str | None = None
    ours: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Journal:
    host: Host
    files: dict[str, FileRecord] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    # Pending actions and facts learnt during install (endpoints, layout); see installer.install.
    data: dict[str, Any] = field(default_factory=dict)

    # ----- persistence -----------------------------------------------------------------------
    @classmethod
    def load(cls, host: Host) -> Journal:
        raw = host.read_if_exists(STATE_FILE)
        if raw is None:
            return cls(host)
        try:
            doc = json.loads(raw)
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported state format version {doc.get('version')!r}")
            files = {p: FileRecord(**rec) for p, rec in doc["files"].items()}
            return cls(host, files=files, dirs=list(doc["dirs"]), data=dict(doc["data"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"state file {STATE_FILE} on the node is unreadable ({exc}); "
                               "refusing to guess what was installed") from exc

    @property
    def exists(self) -> bool:
        return self.host.exists(STATE_FILE)

    def save(self) -> None:
        self.host.makedirs(BACKUP_DIR, 0o700)
        doc = {"version": FORMAT_VERSION, "files": {p: r.to_json() for p, r in sorted(self.files.items())},
               "dirs": self.dirs, "data": self.data}
        self.host.write_atomic(STATE_FILE, json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n", 0o600)

    def set(self, key: str, value: Any) -> None:
        if self.data.get(key) != value:
            self.data[key] = value
            self.save()

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    # ----- directories -----------------------------------------------------------------------
    def ensure_dir(self, node_path: str, mode: int = 0o755) -> None:
        """Create a directory, recording the ones we created (recorded first, then created)."""
        missing = []
        current = ""
        for part in [p for p in node_path.split("/") if p]:
            current += "/" + part
            if not self.host.exists(current):
                missing.append(current)
        if not missing:
            return
        new = [d for d in missing if d not in self.dirs]
        if new:
            self.dirs.extend(new)
            self.save()
        self.host.makedirs(node_path, mode)
        log.info("created directory %s", node_path, extra={"path": node_path, "change": "mkdir"})

    def remove_dirs(self, keep: Collection[str] = ()) -> None:
        """Remove the directories we created, innermost first, if they are empty. Those in ``keep``, and the
        directories above them, stay and stay recorded."""
        kept = {"/".join(k.split("/")[:i]) for k in keep for i in range(2, k.count("/") + 2)}
        for d in sorted(self.dirs, key=lambda p: p.count("/"), reverse=True):
            if d in kept:
                continue
            if self.host.exists(d) and not self.host.rmdir_if_empty(d):
                log.warning("directory %s is not empty (it holds files we did not create); leaving it",
                            d, extra={"path": d})
                continue
            self.dirs.remove(d)
            self.save()
            log.info("removed directory %s", d, extra={"path": d, "change": "rmdir"})

    # ----- files -----------------------------------------------------------------------------
    def _backup_name(self, node_path: str) -> str:
        return f"{BACKUP_DIR}/{urllib.parse.quote(node_path, safe='')}"

    def _take_backup(self, node_path: str, group: str) -> FileRecord:
        original = self.host.read_if_exists(node_path)
        if original is None:
            return FileRecord(node_path, group, existed=False)
        mode = self.host.mode(node_path)
        orig_sha = sha256_bytes(original)
        backup = self._backup_name(node_path)
        self.host.makedirs(BACKUP_DIR, 0o700)
        self.host.write_atomic(backup, original, 0o600)
        if self.host.file_sha256(backup) != orig_sha:
            raise JournalError(f"backup of {node_path} does not match its checksum after writing")
        return FileRecord(node_path, group, existed=True, orig_sha256=orig_sha, orig_mode=mode, backup=backup)

    def current_is_ours(self, node_path: str) -> bool:
        rec = self.files.get(node_path)
        return rec is not None and self.host.file_sha256(node_path) in rec.ours

    def put_file(self, node_path: str, data: bytes, *, group: str, mode: int | None = None) -> bool:
        """Make the node file hold ``data``; True if the file changed. (The program itself is a release:
        installer.release.)"""
        new_sha = sha256_bytes(data)
        current = self.host.file_sha256(node_path)
        rec = self.files.get(node_path)
        if rec is None:
            rec = self._take_backup(node_path, group)
            current = rec.orig_sha256
            self.files[node_path] = rec
            self.save()
            if rec.existed:
                log.info("backed up %s", node_path,
                         extra={"path": node_path, "sha256": rec.orig_sha256, "backup": rec.backup})
        elif current is not None and current not in rec.ours and current != rec.orig_sha256:
            if rec.existed:
                # Its owner rewrote the file after we changed it: that is the new original.
                fresh = self._take_backup(node_path, group)
                rec.orig_sha256, rec.orig_mode = fresh.orig_sha256, fresh.orig_mode
                self.save()
                log.warning("%s was rewritten by someone else since we changed it; taking the new "
                            "content as the original to restore", node_path,
                            extra={"path": node_path, "sha256": current})
            else:
                log.warning("%s (created by the installer) was changed by someone else; overwriting",
                            node_path, extra={"path": node_path, "sha256": current})
        if mode is None:
            mode = rec.orig_mode if rec.orig_mode is not None else 0o644
        if current == new_sha:
            if rec.ours != [new_sha]:
                rec.ours = [new_sha]
                self.save()
            if self.host.mode(node_path) != mode:
                os.chmod(self.host.path(node_path), mode)
                log.info("set mode of %s to %o", node_path, mode, extra={"path": node_path, "change": "chmod"})
                return True
            return False
        if new_sha not in rec.ours:
            rec.ours.append(new_sha)
            self.save()
        failpoints.hit("file-journaled")
        parent = node_path.rsplit("/", 1)[0] or "/"
        self.ensure_dir(parent)
        self.host.write_atomic(node_path, data, mode)
        # Written: earlier contents of ours can no longer be found in the file.
        rec.ours = [new_sha]
        self.save()
        log.info("wrote %s", node_path,
                 extra={"path": node_path, "sha256": new_sha, "previous_sha256": current, "change": "write"})
        return True

    def restore_file(self, node_path: str) -> bool:
        """Give a file back its original bytes, or remove it if we created it. True if it changed."""
        rec = self.files.get(node_path)
        if rec is None:
            return False
        current = self.host.file_sha256(node_path)
        changed = False
        if current is not None and current not in rec.ours and current != rec.orig_sha256:
            log.warning("%s holds content the installer did not write; leaving it as it is", node_path,
                        extra={"path": node_path, "sha256": current})
        elif rec.existed:
            assert rec.backup is not None
            original = self.host.read_if_exists(rec.backup)
            if original is None or sha256_bytes(original) != rec.orig_sha256:
                raise JournalError(f"backup {rec.backup} of {node_path} is missing or does not match "
                                   f"checksum {rec.orig_sha256}; not touching {node_path}")
            if current != rec.orig_sha256 or self.host.mode(node_path) != rec.orig_mode:
                self.host.write_atomic(node_path, original, rec.orig_mode if rec.orig_mode is not None else 0o644)
                changed = True
                log.info("restored %s from its backup", node_path,
                         extra={"path": node_path, "sha256": rec.orig_sha256, "change": "restore"})
        elif current is not None:
            self.host.remove(node_path)
            changed = True
            log.info("removed %s", node_path, extra={"path": node_path, "change": "remove"})
        del self.files[node_path]
        self.save()
        if rec.backup:
            self.host.remove(rec.backup)
        return changed

    def forget_file(self, node_path: str) -> None:
        """Stop tracking a file whose ownership moved elsewhere (the executable became a release symlink)."""
        rec = self.files.pop(node_path, None)
        if rec is None:
            return
        self.save()
        if rec.backup:
            self.host.remove(rec.backup)

    def paths(self, group: str) -> list[str]:
        return sorted(p for p, r in self.files.items() if r.group == group)

    def restore_group(self, group: str) -> list[str]:
        return [p for p in self.paths(group) if self.restore_file(p)]

    def restart(self) -> None:
        """Forget every fact and pending action, keeping the directories still recorded: a relay's journal
        becoming the NRI plugin's (whose uninstall removes those directories later). Files must be restored first."""
        if self.files:
            raise JournalError(f"refusing to restart the journal: still records {sorted(self.files)}")
        self.data = {}
        self.save()

    def clear(self) -> None:
        """Drop the state directory; only once everything it describes has been reversed."""
        if self.files or self.dirs:
            raise JournalError(f"refusing to drop the journal: still records {sorted(self.files)} {self.dirs}")
        self.host.remove_tree(STATE_DIR)
        self.data = {}
        log.info("removed installer state %s", STATE_DIR, extra={"path": STATE_DIR, "change": "remove"})
