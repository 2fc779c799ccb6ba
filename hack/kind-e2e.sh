#!/usr/bin/env bash
# `make kind-e2e`: tests/e2e against a real cluster: kind (nodes in Docker), the image built from this tree,
# and the Helm chart. Needs a running Docker, kind, helm and kubectl on PATH, and the venv (`make venv`).
# Not run in CI (no container engine there).
#   KIND_CLUSTER=NAME  the kind cluster (default gymsandbox-e2e); an existing one of that name is reused
#   KEEP_CLUSTER=1     keep the cluster at the end; otherwise it is deleted on exit, also when it was reused
# Extra arguments go to pytest, e.g. `hack/kind-e2e.sh -x -k gymhost`.
# Your kubeconfig is never touched: the cluster's kubeconfig lives in a temporary file for this run only.
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${KIND_CLUSTER:-gymsandbox-e2e}
image=gymsandbox/gymsandbox:e2e
release=gymsandbox
namespace=gymsandbox-system

say() { echo "kind-e2e.sh: $*" >&2; }

for tool in docker kind helm kubectl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "$tool is not on PATH; this needs docker (running), kind, helm and kubectl"
    exit 1
  fi
done
if ! docker info >/dev/null 2>&1; then
  say "'docker info' fails: kind needs a running Docker daemon"
  exit 1
fi
if [[ ! -x .venv/bin/pytest ]]; then
  say ".venv/bin/pytest is missing; run \`make venv\` (or \`make kind-e2e\`, which does)"
  exit 1
fi

kubeconfig=$(mktemp "${TMPDIR:-/tmp}/gymsandbox-kind-e2e.kubeconfig.XXXXXX")
# shellcheck disable=SC2317  # run by the EXIT trap, which shellcheck 0.9 does not follow
cleanup() {
  local status=$?
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    say "keeping kind cluster $cluster (KEEP_CLUSTER=1); remove it with: kind delete cluster --name $cluster"
  else
    kind delete cluster --name "$cluster" --kubeconfig "$kubeconfig" || say "could not delete kind cluster $cluster"
  fi
  rm -f "$kubeconfig"
  exit "$status"
}
trap cleanup EXIT

# `kind get clusters` lists one name per line (and says "No kind clusters found." on stderr).
clusters=$(kind get clusters 2>/dev/null || true)
if grep -qxF -- "$cluster" <<<"$clusters"; then
  say "reusing kind cluster $cluster"
else
  kind create cluster --name "$cluster" --kubeconfig "$kubeconfig" --wait 180s
fi
kind get kubeconfig --name "$cluster" >"$kubeconfig"
export KUBECONFIG=$kubeconfig

IMAGE=$image hack/image.sh
kind load docker-image "$image" --name "$cluster"
# The tag stays `e2e` across runs: a pod annotation with the image ID makes a rebuilt image roll the
# Deployments on a reused cluster (an unchanged image changes nothing).
image_id=$(docker image inspect --format '{{.Id}}' "$image")

# kind's containerd has no crun; its runc handler stands in, so that pods of the `crun` profile run.
kubectl apply -f - <<'EOF'
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: crun
handler: runc
EOF

helm upgrade --install "$release" charts/gymsandbox-operator \
  --namespace "$namespace" --create-namespace \
  --set image.repository=gymsandbox/gymsandbox --set image.tag=e2e --set image.pullPolicy=Never \
  --set-string "operator.podAnnotations.gymsandbox-e2e/image-id=$image_id" \
  --set-string "broker.podAnnotations.gymsandbox-e2e/image-id=$image_id" \
  --values tests/e2e/kind-values.yaml \
  --wait --timeout 5m

status=0
GYMSANDBOX_E2E_RELEASE=$release GYMSANDBOX_E2E_NAMESPACE=$namespace \
  .venv/bin/pytest -m e2e tests/e2e "$@" || status=$?
if ((status != 0)); then
  say "tests failed ($status); the cluster as it is now:"
  kubectl get pods --all-namespaces -o wide || true
  kubectl get gymhosts --all-namespaces || true
  kubectl --namespace "$namespace" logs "deployment/$release-operator" --tail=100 || true
fi
exit "$status"
