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

# patch_shoot_extensions enable|disable [ARGS...]: computes the patch with hacks/shoot_extensions.py
# (the one implementation, shared with the e2e suite) and applies it; no patch when nothing changes.
patch_shoot_extensions() {
  local current patch
  current="$("$KUBECTL" -n "$NAMESPACE" get shoot "$SHOOT" -o json)"
  patch="$(python3 "$(dirname "${BASH_SOURCE[0]}")/shoot_extensions.py" "$@" --type "$EXTENSION_TYPE" <<<"$current")"
  if [ -n "$patch" ]; then
    "$KUBECTL" -n "$NAMESPACE" patch shoot "$SHOOT" --type merge -p "$patch"
  fi
}
