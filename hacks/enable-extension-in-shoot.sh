#!/usr/bin/env bash
# Enable cri-resmgr in a shoot: adds spec.extensions[] type cri-resmgr-extension with an
# optional providerConfig from a YAML file (see examples/shoot.yaml for its shape).
# Usage: hacks/enable-extension-in-shoot.sh SHOOT [PROJECT_NAMESPACE] [PROVIDER_CONFIG_YAML]
. "$(dirname "$0")/lib-shoot.sh"
shoot_args "$@"
PC_FILE="${3:-}"
if [ -n "$PC_FILE" ] && [ ! -r "$PC_FILE" ]; then
  echo "cannot read providerConfig file $PC_FILE" >&2
  exit 2
fi
current="$("$KUBECTL" -n "$NAMESPACE" get shoot "$SHOOT" -o json)"
patched="$(python3 -c '
import json, sys, yaml
typ, pc_file = sys.argv[1], sys.argv[2]
shoot = json.load(sys.stdin)
exts = [e for e in shoot["spec"].get("extensions", []) if e.get("type") != typ]
entry = {"type": typ}
if pc_file:
    pc = yaml.safe_load(open(pc_file))
    if not isinstance(pc, dict):
        sys.exit(f"{pc_file}: providerConfig must be a mapping")
    entry["providerConfig"] = pc
exts.append(entry)
print(json.dumps({"spec": {"extensions": exts}}))' "$EXTENSION_TYPE" "$PC_FILE" <<<"$current")"
"$KUBECTL" -n "$NAMESPACE" patch shoot "$SHOOT" --type merge -p "$patched"
echo "enabled $EXTENSION_TYPE in shoot $NAMESPACE/$SHOOT"
