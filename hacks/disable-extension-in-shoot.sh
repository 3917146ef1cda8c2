#!/usr/bin/env bash
# Disable cri-resmgr in a shoot: removes the cri-resmgr-extension entry from spec.extensions.
# gardenlet then deletes the Extension, and the extension uninstalls cri-resmgr from every node.
# Usage: hacks/disable-extension-in-shoot.sh SHOOT [PROJECT_NAMESPACE]
. "$(dirname "$0")/lib-shoot.sh"
shoot_args "$@"
current="$("$KUBECTL" -n "$NAMESPACE" get shoot "$SHOOT" -o json)"
patched="$(python3 -c '
import json, sys
typ = sys.argv[1]
shoot = json.load(sys.stdin)
exts = [e for e in shoot["spec"].get("extensions", []) if e.get("type") != typ]
print(json.dumps({"spec": {"extensions": exts}}))' "$EXTENSION_TYPE" <<<"$current")"
"$KUBECTL" -n "$NAMESPACE" patch shoot "$SHOOT" --type merge -p "$patched"
echo "disabled $EXTENSION_TYPE in shoot $NAMESPACE/$SHOOT"
