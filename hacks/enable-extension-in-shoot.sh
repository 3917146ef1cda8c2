#!/usr/bin/env bash
# Enable cri-resmgr in a shoot: adds (or re-enables) the spec.extensions[] entry of type
# cri-resmgr-extension, optionally with a providerConfig from a YAML file (see examples/shoot.yaml
# for its shape; without one an existing providerConfig is kept). Other extensions are untouched.
# Usage: hacks/enable-extension-in-shoot.sh SHOOT [PROJECT_NAMESPACE] [PROVIDER_CONFIG_YAML]
. "$(dirname "$0")/lib-shoot.sh"
shoot_args "$@"
PC_FILE="${3:-}"
if [ -n "$PC_FILE" ] && [ ! -r "$PC_FILE" ]; then
  echo "cannot read providerConfig file $PC_FILE" >&2
  exit 2
fi
patch_shoot_extensions enable ${PC_FILE:+--provider-config "$PC_FILE"}
echo "enabled $EXTENSION_TYPE in shoot $NAMESPACE/$SHOOT"
