# Shared helpers for the hacks/*-shoot scripts (sourced, not run).
# Needs kubectl pointing at the garden cluster (KUBECONFIG) and a shoot NAME in PROJECT_NAMESPACE.
set -euo pipefail

KUBECTL="${KUBECTL:-$(command -v kubectl || echo "${CRI_RESMGR_DEV_CACHE:-$HOME/.cache/cri-resmgr-dev}/bin/kubectl")}"
EXTENSION_TYPE="cri-resmgr-extension"

shoot_args() {
  if [ $# -lt 1 ]; then
    echo "usage: $(basename "$0") SHOOT_NAME [PROJECT_NAMESPACE (default: garden-local)]" >&2
    exit 2
  fi
  SHOOT="$1"
  NAMESPACE="${2:-garden-local}"
  "$KUBECTL" -n "$NAMESPACE" get shoot "$SHOOT" >/dev/null
}
