#!/usr/bin/env bash
# Export an admin kubeconfig of a shoot (via the shoots/adminkubeconfig subresource).
# Usage: hacks/export-shoot-kubeconfig.sh SHOOT [PROJECT_NAMESPACE] [OUTPUT (default: ./SHOOT.kubeconfig)] [EXPIRATION_SECONDS]
. "$(dirname "$0")/lib-shoot.sh"
shoot_args "$@"
OUT="${3:-./$SHOOT.kubeconfig}"
EXPIRATION="${4:-3600}"
request="{\"apiVersion\":\"authentication.gardener.cloud/v1alpha1\",\"kind\":\"AdminKubeconfigRequest\",\"spec\":{\"expirationSeconds\":$EXPIRATION}}"
"$KUBECTL" create --raw "/apis/core.gardener.cloud/v1beta1/namespaces/$NAMESPACE/shoots/$SHOOT/adminkubeconfig" \
  -f - <<<"$request" | python3 -c 'import base64,json,sys; sys.stdout.write(base64.b64decode(json.load(sys.stdin)["status"]["kubeconfig"]).decode())' >"$OUT"
chmod 600 "$OUT"
echo "wrote $OUT (valid for ${EXPIRATION}s)"
