#!/usr/bin/env bash
# Disable cri-resmgr in a shoot: removes the cri-resmgr-extension entry from spec.extensions.
# gardenlet then deletes the Extension, and the extension uninstalls cri-resmgr from every node.
# Usage: hacks/disable-extension-in-shoot.sh SHOOT [PROJECT_NAMESPACE]
. "$(dirname "$0")/lib-shoot.sh"
shoot_args "$@"
patch_shoot_extensions disable
echo "disabled $EXTENSION_TYPE in shoot $NAMESPACE/$SHOOT"
