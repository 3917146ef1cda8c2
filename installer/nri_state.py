"""Whether this node's containerd serves NRI, and if not, why and how to turn it on.

NRI mode needs containerd's NRI plugin (``io.containerd.nri.v1.nri``): on by default in containerd 2, off by
default in containerd 1.7 (and absent before 1.7). The proof is its socket: containerd makes it when the plugin
runs. containerd's config.toml only explains a missing socket (``disable = true``, or another ``socket_path``,
which the NRI plugin's DaemonSet does not mount).
"""

from __future__ import annotations

import logging
import stat
import tomllib
from dataclasses import dataclass
from typing import Any

from installer.host import Host
from resmgr.options import DEFAULT_NRI_SOCKET

log = logging.getLogger("installer.nri_state")

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
NRI_PLUGIN = "io.containerd.nri.v1.nri"
# In Gardener, gardener-node-agent writes config.toml from the OperatingSystemConfig; its
# spec.criConfig.containerd.plugins adds plugin settings (gardener v1.149.3
# pkg/apis/extensions/v1alpha1/types_operatingsystemconfig.go, PluginConfig).
HOW_TO_TURN_ON = (f'turn it on with `[plugins."{NRI_PLUGIN}"] disable = false` in {CONTAINERD_CONFIG} and a '
                  "containerd restart (on Gardener: the OperatingSystemConfig's criConfig.containerd.plugins entry "
                  f'{{"path": ["{NRI_PLUGIN}"], "values": {{"disable": false}}}}, or a machine image with '
                  "containerd 2, where NRI is on by default)")


@dataclass(frozen=True)
class NriState:
    enabled: bool
    # Why NRI is off and how to turn it on; empty when it is on.
    reason: str = ""


def _nri_config(host: Host) -> dict[str, Any] | None:
    """containerd's NRI plugin section, {} when config.toml has none, None when config.toml is unreadable."""
    raw = host.read_if_exists(CONTAINERD_CONFIG)
    if raw is None:
        return {}
    try:
        doc = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        log.warning("cannot read %s (%s); judging NRI by its socket only", CONTAINERD_CONFIG, exc)
        return None
    section = (doc.get("plugins") or {}).get(NRI_PLUGIN)
    return section if isinstance(section, dict) else {}


def _is_socket(host: Host, node_path: str) -> bool:
    try:
        return stat.S_ISSOCK(host.path(node_path).stat().st_mode)
    except OSError:
        return False


def nri_state(host: Host) -> NriState:
    """NRI is on when containerd's NRI socket is at the path the plugin's DaemonSet mounts."""
    config = _nri_config(host)
    socket_path = str((config or {}).get("socket_path") or DEFAULT_NRI_SOCKET)
    if socket_path != DEFAULT_NRI_SOCKET:
        return NriState(False, f"containerd's NRI socket is configured at {socket_path} ({CONTAINERD_CONFIG}), "
                               f"but cri-resmgr's NRI plugin uses {DEFAULT_NRI_SOCKET}: remove socket_path from "
                               f'[plugins."{NRI_PLUGIN}"] or set it to {DEFAULT_NRI_SOCKET}')
    if _is_socket(host, DEFAULT_NRI_SOCKET):
        return NriState(True)
    if config and config.get("disable") is True:
        why = f'{CONTAINERD_CONFIG} sets disable = true under [plugins."{NRI_PLUGIN}"]'
    elif config is not None and not config:
        why = (f"no {DEFAULT_NRI_SOCKET}, and {CONTAINERD_CONFIG} has no [plugins.\"{NRI_PLUGIN}\"] section "
               "(containerd 1.7 keeps NRI off by default; before 1.7 it has none)")
    else:
        why = f"no NRI socket at {DEFAULT_NRI_SOCKET}"
    return NriState(False, f"containerd's NRI is off on this node ({why}): {HOW_TO_TURN_ON}")
