#!/usr/bin/env bash
# Trigger a reconcile. With a garden kubeconfig: annotate the Shoot (gardenlet then annotates
# the Extension). With --seed and a seed kubeconfig: annotate the Extension in the shoot's
# seed namespace directly (what gardenlet does).
# Usage: hacks/trigger-reconcile.sh SHOOT [PROJECT_NAMESPACE]
#        hacks/trigger-reconcile.sh --seed SHOOT_NAMESPACE_IN_SEED
set -euo pipefail
KUBECTL="${KUBECTL:-$(command -v kubectl || echo "${CRI_RESMGR_DEV_CACHE:-$HOME/.cache/cri-resmgr-dev}/bin/kubectl")}"
if [ "${1:-}" = "--seed" ]; then
  [ $# -eq 2 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
  ns="$2"
  ext="$("$KUBECTL" -n "$ns" get extensions.extensions.gardener.cloud \
    -o jsonpath='{range .items[?(@.spec.type=="cri-resmgr-extension")]}{.metadata.name}{end}')"
  [ -n "$ext" ] || { echo "no cri-resmgr-extension Extension in namespace $ns" >&2; exit 1; }
  "$KUBECTL" -n "$ns" annotate --overwrite extensions.extensions.gardener.cloud "$ext" \
    gardener.cloud/operation=reconcile
  exit 0
fi
. "$(dirname "$0")/lib-shoot.sh"
shoot_args "$@"
"$KUBECTL" -n "$NAMESPACE" annotate --overwrite shoot "$SHOOT" gardener.cloud/operation=reconcile
