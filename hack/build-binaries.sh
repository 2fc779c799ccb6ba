#!/usr/bin/env bash
# Build the pinned control-plane binaries from Go module sources into ~/.cache/gymsandbox.
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
k8s_commands=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

build_kubernetes() {
  local dir=$1 minor
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

targets=("${@:-etcd kwok helm kubernetes}")
for t in ${targets[*]}; do
  case $t in
    etcd) build_once etcd "$cache/etcd-$ETCD_VERSION" build_etcd; echo "etcd=$cache/etcd-$ETCD_VERSION/bin" ;;
    kwok) build_once kwok "$cache/kwok-$KWOK_VERSION" build_kwok; echo "kwok=$cache/kwok-$KWOK_VERSION/bin" ;;
    helm) build_once helm "$cache/helm-$HELM_VERSION" build_helm; echo "helm=$cache/helm-$HELM_VERSION/bin" ;;
    kubernetes) build_once kubernetes "$cache/kubernetes-$K8S_VERSION" build_kubernetes; echo "kubernetes=$cache/kubernetes-$K8S_VERSION/bin" ;;
    *) echo "unknown target: $t" >&2; exit 2 ;;
  esac
done
