"""Config files given on cri-resmgr's command line, read once, and the one place precedence is decided.

``--fallback-config`` and ``--force-config`` are read and validated when cri-resmgr starts
(``StartupConfigs.load``) and the force file again on SIGHUP; nothing else opens them.
``choose_config`` is cri-resource-manager's precedence: **force > the config the agent pushed
(cached) > fallback > built-in defaults**.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resmgr.config import DOCUMENT, MAX_CONFIG_BYTES, ConfigError, ConfigSections, check_config_text, report_findings

try:
    # hashlib imports every built-in hash (md5, sha1, sha2, sha3, blake2: 0.4 MB resident) to offer one;
    # cri-resmgr keeps OpenSSL's _hashlib out (resmgr.launch), so its SHA-256 is this module's anyway.
    from _sha256 import sha256
except ImportError:  # another Python (3.12 calls it _sha2)
    from hashlib import sha256


def sha256_hex(data: bytes) -> str:
    """The SHA-256 digest of ``data`` in hex."""
    return sha256(data).hexdigest()


# Source labels of the startup config (what the agent reports as the node's config source).
FORCE, FALLBACK, CACHE, DEFAULTS = "force-config", "fallback-config", "cache", "defaults"


@dataclass(frozen=True)
class ConfigFile:
    """A validated config read from ``path``, typed; ``digest`` is the SHA-256 of its bytes."""

    path: str
    sections: ConfigSections
    digest: str

    @property
    def config(self) -> dict[str, Any]:
        """The normalised mapping (what the resource manager keeps and compares)."""
        return self.sections.raw


def read_config_file(path: str | Path) -> ConfigFile:
    """Read and validate a config file; raises ConfigError naming the file and the problem."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)  # never slurp an arbitrarily large file
    except OSError as exc:
        raise ConfigError(DOCUMENT, f"cannot read config file: {exc.strerror or exc}", source=source) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(DOCUMENT, f"config file is over the limit of {MAX_CONFIG_BYTES} bytes", source=source)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(DOCUMENT, f"config file is not UTF-8 text: {exc}", source=source) from None
    checked = report_findings(check_config_text(text, source=source), source)
    return ConfigFile(source, checked.sections, sha256_hex(raw))


@dataclass(frozen=True)
class StartupConfigs:
    """The ``--force-config`` and ``--fallback-config`` files, if given."""

    force: ConfigFile | None = None
    fallback: ConfigFile | None = None

    @classmethod
    def load(cls, force_path: str | None, fallback_path: str | None) -> StartupConfigs:
        return cls(force=read_config_file(force_path) if force_path else None,
                   fallback=read_config_file(fallback_path) if fallback_path else None)

    @property
    def force_config(self) -> dict[str, Any] | None:
        return self.force.config if self.force is not None else None

    @property
    def fallback_config(self) -> dict[str, Any] | None:
        return self.fallback.config if self.fallback is not None else None

    def describe(self, source: str) -> str:
        """A source label as a person reads it: the file's path for the two files."""
        file = {FORCE: self.force, FALLBACK: self.fallback}.get(source)
        return file.path if file is not None else source


def choose_config(*, force: dict[str, Any] | None = None, cached: dict[str, Any] | None = None,
                  cached_source: str = "", fallback: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The config in force at startup and its source label: force > cached (agent) > fallback > defaults."""
    if force is not None:
        return force, FORCE
    if cached is not None:
        return cached, cached_source or CACHE
    if fallback is not None:
        return fallback, FALLBACK
    return {}, DEFAULTS
