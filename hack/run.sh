#!/usr/bin/env bash
# `make run`: the operator against KUBECONFIG's cluster, or against a local control plane started here,
# with the sample policy and the sample GymHost. Ctrl-C stops the operator; `make cluster-down` the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

kubectl="$(hack/build-binaries.sh kubernetes | sed -n 's/^kubernetes=//p')/kubectl"
if [[ -z "${KUBECONFIG:-}" ]]; then
  .venv/bin/python hack/cluster.py up
  export KUBECONFIG="$PWD/.cluster/kubeconfig"
fi
policy=${GYMSANDBOX_POLICY:-examples/policy.yaml}
sample=${GYMSANDBOX_SAMPLE:-examples/gymhost.yaml}

"$kubectl" create namespace gymsandbox-system --dry-run=client -o yaml | "$kubectl" apply -f -
"$kubectl" apply --server-side --force-conflicts -f crds/
"$kubectl" wait --for=condition=Established --timeout=60s -f crds/

metrics=${GYMSANDBOX_METRICS_LISTEN:-127.0.0.1:9090}
.venv/bin/gymsandbox operator --policy "$policy" --metrics-listen "$metrics" &
operator=$!
trap 'kill "$operator" 2>/dev/null || true; wait "$operator" 2>/dev/null || true' EXIT INT TERM

if [[ "$sample" != none ]]; then
  "$kubectl" apply -f "$sample"
  "$kubectl" wait --for=condition=Ready --timeout=120s gymhost --all
  "$kubectl" get gymhosts
  echo
  echo "The sample is Ready. Try: KUBECONFIG=$KUBECONFIG $kubectl describe gymhost"
fi
echo "The operator runs as pid $operator with policy $policy, metrics on http://$metrics/metrics; Ctrl-C stops it."
wait "$operator"
