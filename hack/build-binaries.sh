#!/usr/bin/env bash
# Build the pinned binaries from Go module sources into ~/.cache/gymsandbox: the control plane by default;
# the real node's with `kubelet containerd gvisor knp coredns`; agent-sandbox's controller (bench/episodes.py's
# reference) with `agent-sandbox`.
# Each component lives in a directory keyed by its version and is rebuilt only when its pin changes.
# Prints the bin directory of every component on success (one "NAME=DIR" line each, on stdout).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${GYMSANDBOX_CACHE:-$HOME/.cache/gymsandbox}
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
export CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=local GOPROXY=${GOPROXY:-https://proxy.golang.org}
mkdir -p "$GOMODCACHE" "$GOCACHE"
# One build at a time: a second caller waits here, then finds the binaries cached.
exec 9>"$cache/.lock"
flock 9

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# build_once NAME DIR CMD...: run CMD to fill DIR/bin unless DIR/.done exists.
build_once() {
  local name=$1 dir=$2; shift 2
  if [[ -f "$dir/.done" ]]; then
    log "$name: cached in $dir"
    return
  fi
  rm -rf "$dir"; mkdir -p "$dir/bin" "$dir/src"
  log "$name: building into $dir (first time only; this takes a while)"
  local start=$SECONDS
  "$@" "$dir"
  touch "$dir/.done"
  log "$name: done in $((SECONDS - start)) s"
}

staging_modules=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
  cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
  kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
  sample-apiserver sample-cli-plugin sample-controller streaming)

# build_kubernetes DIR COMMAND...: the named k8s.io/kubernetes commands, through a wrapper module that pins
# the staging modules (k8s.io/kubernetes itself points them at ./staging, which a dependency cannot use).
build_kubernetes() {
  local dir=$1 minor
  shift
  local k8s_commands=("$@")
  minor=$(cut -d. -f2 <<<"$K8S_VERSION")
  {
    printf 'module gymsandbox.dev/hack/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    for m in "${staging_modules[@]}"; do printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$K8S_STAGING_VERSION"; done
    printf ')\n'
  } >"$dir/src/go.mod"
  {
    printf 'package tools\n\nimport (\n'
    for c in "${k8s_commands[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } >"$dir/src/tools.go"
  # tools.go imports main packages, which go build refuses as a library; keep it out of builds.
  sed -i '1i //go:build tools\n' "$dir/src/tools.go"
  log "kubernetes: resolving modules (go mod tidy)"
  (cd "$dir/src" && go mod tidy)
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  for c in "${k8s_commands[@]}"; do
    log "kubernetes: compiling $c"
    (cd "$dir/src" && go build -ldflags "$ldflags" -o "$dir/bin/$c" "k8s.io/kubernetes/cmd/$c")
  done
}

build_etcd() {
  local dir=$1
  printf 'module gymsandbox.dev/hack/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$dir/src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$dir/src/tools.go"
  log "etcd: resolving modules (go mod tidy)"
  (cd "$dir/src" && go mod tidy)
  log "etcd: compiling"
  (cd "$dir/src" && go build -ldflags "-s -w" -o "$dir/bin/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  local dir=$1
  log "kwok: go install"
  GOBIN="$dir/bin" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok needs stage definitions; ship the upstream defaults next to the binary.
  local moddir="$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION"
  mkdir -p "$dir/stages"
  cp -r "$moddir/kustomize/stage/." "$dir/stages/"
  chmod -R u+w "$dir/stages"
}

build_helm() {
  local dir=$1
  log "helm: go install"
  GOBIN="$dir/bin" go install -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

build_kubernetes_control_plane() { build_kubernetes "$1" kube-apiserver kube-controller-manager kube-scheduler kubectl; }
build_kubernetes_node() { build_kubernetes "$1" kubelet kube-proxy; }

# ---- the real node (hack/localcluster/node.py) ---------------------------------------------------------

# source_key FILE: the first 12 hex digits of a file under hack/ that a build uses, so changing it rebuilds.
source_key() { sha256sum "$here/$1" | cut -c1-12; }

# module_source MODULE@VERSION DIR: a writable copy of a module's source, to patch and build in place.
module_source() {
  local module=$1 dir=$2
  (cd "$dir" && go mod download -json "$module" >/dev/null)
  cp -r "$GOMODCACHE/$module" "$dir/src/tree"
  chmod -R u+w "$dir/src/tree"
}

build_containerd() {
  local dir=$1 cmd=github.com/containerd/containerd/v2/cmd
  log "containerd: compiling containerd, containerd-shim-runc-v2, ctr"
  GOBIN="$dir/bin" go install -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    "$cmd/containerd@$CONTAINERD_VERSION" "$cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$cmd/ctr@$CONTAINERD_VERSION"
}

build_gvisor() {
  local dir=$1
  log "gvisor: compiling runsc"
  GOBIN="$dir/bin" go install -ldflags "-s -w" "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
  module_source "gvisor.dev/gvisor@$GVISOR_VERSION" "$dir"
  log "gvisor: compiling containerd-shim-runsc-v1 (patched: hack/patches/gvisor-shim-oom-score.patch)"
  (cd "$dir/src/tree" && patch -p1 --quiet <"$here/patches/gvisor-shim-oom-score.patch" &&
    go build -ldflags "-s -w" -o "$dir/bin/containerd-shim-runsc-v1" ./shim)
  rm -rf "$dir/src/tree"
}

build_knp() {
  local dir=$1
  module_source "sigs.k8s.io/kube-network-policies@$KNP_VERSION" "$dir"
  log "kube-network-policies: compiling (patched: hack/patches/kube-network-policies-xt-nfqueue.patch)"
  (cd "$dir/src/tree" && patch -p1 --quiet <"$here/patches/kube-network-policies-xt-nfqueue.patch" &&
    go build -ldflags "-s -w" -o "$dir/bin/kube-network-policies" ./cmd)
  rm -rf "$dir/src/tree"
}

# CoreDNS with only the plugins cluster DNS needs (hack/node/coredns-main.go): a fraction of the full
# build's time, and no cloud-provider SDKs.
build_coredns() {
  local dir=$1
  printf 'module gymsandbox.dev/hack/coredns\n\ngo 1.26.0\n\nrequire github.com/coredns/coredns %s\n' \
    "$COREDNS_VERSION" >"$dir/src/go.mod"
  cp "$here/node/coredns-main.go" "$dir/src/main.go"
  log "coredns: resolving modules (go mod tidy)"
  (cd "$dir/src" && go mod tidy)
  log "coredns: compiling"
  (cd "$dir/src" && go build -ldflags "-s -w" -o "$dir/bin/coredns" .)
}

# ---- the bench's reference (bench/agent_sandbox.py) ---------------------------------------------------------

# agent-sandbox's controller, and its Sandbox CRD beside it (crds/): the module's own, unchanged.
build_agent_sandbox() {
  local dir=$1 module=sigs.k8s.io/agent-sandbox
  printf 'module gymsandbox.dev/hack/agentsandbox\n\ngo 1.26.0\n\nrequire %s %s\n' "$module" "$AGENT_SANDBOX_VERSION" \
    >"$dir/src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/agent-sandbox-controller"\n' "$module" >"$dir/src/tools.go"
  log "agent-sandbox: resolving modules (go mod tidy)"
  (cd "$dir/src" && go mod tidy)
  log "agent-sandbox: compiling agent-sandbox-controller"
  (cd "$dir/src" && go build -ldflags "-s -w" -o "$dir/bin/agent-sandbox-controller" "$module/cmd/agent-sandbox-controller")
  mkdir -p "$dir/crds"
  cp "$GOMODCACHE/$module@$AGENT_SANDBOX_VERSION/k8s/crds/agents.x-k8s.io_sandboxes.yaml" "$dir/crds/"
  chmod u+w "$dir/crds/"*
}

targets=("${@:-etcd kwok helm kubernetes}")
for t in ${targets[*]}; do
  case $t in
    etcd) build_once etcd "$cache/etcd-$ETCD_VERSION" build_etcd; echo "etcd=$cache/etcd-$ETCD_VERSION/bin" ;;
    kwok) build_once kwok "$cache/kwok-$KWOK_VERSION" build_kwok; echo "kwok=$cache/kwok-$KWOK_VERSION/bin" ;;
    helm) build_once helm "$cache/helm-$HELM_VERSION" build_helm; echo "helm=$cache/helm-$HELM_VERSION/bin" ;;
    kubernetes)
      build_once kubernetes "$cache/kubernetes-$K8S_VERSION" \
        build_kubernetes_control_plane
      echo "kubernetes=$cache/kubernetes-$K8S_VERSION/bin" ;;
    kubelet)
      build_once kubelet "$cache/kubelet-$K8S_VERSION" build_kubernetes_node
      echo "kubelet=$cache/kubelet-$K8S_VERSION/bin" ;;
    containerd)
      build_once containerd "$cache/containerd-$CONTAINERD_VERSION" build_containerd
      echo "containerd=$cache/containerd-$CONTAINERD_VERSION/bin" ;;
    gvisor)
      d="$cache/gvisor-$GVISOR_VERSION-$(source_key patches/gvisor-shim-oom-score.patch)"
      build_once gvisor "$d" build_gvisor; echo "gvisor=$d/bin" ;;
    knp)
      d="$cache/kube-network-policies-$KNP_VERSION-$(source_key patches/kube-network-policies-xt-nfqueue.patch)"
      build_once kube-network-policies "$d" build_knp; echo "knp=$d/bin" ;;
    coredns)
      d="$cache/coredns-$COREDNS_VERSION-$(source_key node/coredns-main.go)"
      build_once coredns "$d" build_coredns; echo "coredns=$d/bin" ;;
    agent-sandbox)
      build_once agent-sandbox "$cache/agent-sandbox-$AGENT_SANDBOX_VERSION" build_agent_sandbox
      echo "agent-sandbox=$cache/agent-sandbox-$AGENT_SANDBOX_VERSION" ;;
    *) echo "unknown target: $t" >&2; exit 2 ;;
  esac
done
