#!/usr/bin/env python3
"""Enable or disable an extension in a Shoot's ``spec.extensions``: the one implementation.

Used by hacks/enable-extension-in-shoot.sh, hacks/disable-extension-in-shoot.sh (as a filter:
Shoot JSON on stdin, a merge patch on stdout) and by the e2e suite (devland/shoot_ops.py
imports the functions). Plain standard library plus PyYAML (only to read a providerConfig file).

Every shape of ``spec.extensions`` is handled: missing, null, empty, other extensions present, ours
present with or without providerConfig, ours ``disabled: true``, ours listed twice. Other entries
are kept untouched and in order. The patch carries ``metadata.resourceVersion`` so a concurrent
change of the Shoot makes the patch fail (409) instead of being overwritten: a merge patch replaces
lists wholesale.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from typing import Any

EXTENSION_TYPE = "cri-resmgr-extension"


class ShootShapeError(ValueError):
    """The Shoot's spec.extensions is not something Gardener would accept; nothing is changed."""


def _extensions(shoot: dict) -> list[dict]:
    if not isinstance(shoot, dict) or not isinstance(shoot.get("spec"), dict):
        raise ShootShapeError("not a Shoot: .spec is missing or not a mapping")
    exts = shoot["spec"].get("extensions")
    if exts is None:  # missing or null
        return []
    if not isinstance(exts, list):
        raise ShootShapeError(f"spec.extensions must be a list, got {type(exts).__name__}")
    for i, e in enumerate(exts):
        if not isinstance(e, dict) or not isinstance(e.get("type"), str):
            raise ShootShapeError(f"spec.extensions[{i}] must be a mapping with a string 'type'")
    return copy.deepcopy(exts)


def enabled_extensions(shoot: dict, provider_config: dict | None = None,
                       ext_type: str = EXTENSION_TYPE) -> list[dict]:
    """spec.extensions with ``ext_type`` enabled.

    An existing entry keeps its position and, when ``provider_config`` is None, its providerConfig;
    ``disabled`` is removed. A second entry of the same type (rejected by Gardener's validation) is
    dropped so exactly one remains.
    """
    if provider_config is not None and not isinstance(provider_config, dict):
        raise ShootShapeError(f"providerConfig must be a mapping, got {type(provider_config).__name__}")
    out: list[dict] = []
    ours: dict | None = None
    for e in _extensions(shoot):
        if e["type"] != ext_type:
            out.append(e)
        elif ours is None:
            ours = e
            out.append(e)
    if ours is None:
        ours = {"type": ext_type}
        out.append(ours)
    ours.pop("disabled", None)
    if provider_config is not None:
        ours["providerConfig"] = copy.deepcopy(provider_config)
    return out


def disabled_extensions(shoot: dict, ext_type: str = EXTENSION_TYPE, *, keep_entry: bool = False) -> list[dict]:
    """spec.extensions with ``ext_type`` disabled.

    By default every entry of the type is removed (the registration is not globally enabled, so
    no entry means disabled). With ``keep_entry`` the entry stays with ``disabled: true`` and its
    providerConfig, which is what a globally enabled registration needs.
    """
    out: list[dict] = []
    kept = False
    for e in _extensions(shoot):
        if e["type"] != ext_type:
            out.append(e)
        elif keep_entry and not kept:
            e["disabled"] = True
            out.append(e)
            kept = True
    if keep_entry and not kept:
        out.append({"type": ext_type, "disabled": True})
    return out


def merge_patch(shoot: dict, extensions: list[dict]) -> dict | None:
    """The merge patch setting spec.extensions, or None when nothing would change."""
    current = shoot.get("spec", {}).get("extensions")
    if (current or []) == extensions:  # missing, null and [] all mean none
        return None
    patch: dict[str, Any] = {"spec": {"extensions": extensions}}
    rv = shoot.get("metadata", {}).get("resourceVersion")
    if rv:
        patch["metadata"] = {"resourceVersion": rv}
    return patch


def _load_provider_config(path: str) -> dict:
    import yaml  # only needed here

    try:
        with open(path, encoding="utf-8") as f:
            pc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ShootShapeError(f"{path}: cannot read providerConfig: {e}") from e
    if not isinstance(pc, dict):
        raise ShootShapeError(f"{path}: providerConfig must be a mapping")
    return pc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Read a Shoot as JSON on stdin and print the JSON merge patch that enables or "
                    "disables an extension in spec.extensions (empty output: already in that state).")
    p.add_argument("action", choices=["enable", "disable"])
    p.add_argument("--type", default=EXTENSION_TYPE, help=f"extension type (default {EXTENSION_TYPE})")
    p.add_argument("--provider-config", metavar="YAML_FILE",
                   help="enable: set this providerConfig (default: keep the existing one)")
    p.add_argument("--keep-entry", action="store_true",
                   help="disable: keep the entry with disabled: true (for globally enabled registrations)")
    args = p.parse_args(argv)
    try:
        shoot = json.load(sys.stdin)
        if args.action == "enable":
            pc = _load_provider_config(args.provider_config) if args.provider_config else None
            exts = enabled_extensions(shoot, pc, args.type)
        else:
            exts = disabled_extensions(shoot, args.type, keep_entry=args.keep_entry)
    except (ShootShapeError, json.JSONDecodeError) as e:
        print(f"shoot_extensions: {e}", file=sys.stderr)
        return 2
    patch = merge_patch(shoot, exts)
    if patch is not None:
        print(json.dumps(patch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
