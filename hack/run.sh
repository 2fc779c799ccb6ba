#!/usr/bin/env bash
# `make run`. With no KUBECONFIG: the local control plane and, where this machine can run it, the real node;
# then the chart (the operator and the broker as pods), the sample Gym host (examples/gym-host/) under gVisor,
# one rollout posted to it end to end and its reward printed; then it follows the operator's log until
# Ctrl-C (the cluster keeps running: `make cluster-down` stops it).
# With KUBECONFIG set, or where the real node cannot run: the operator runs here against that cluster with
# the sample policy and applies examples/gymhost.yaml (its image is a placeholder: it shows admission and
# status; the sample Gym host needs images the cluster can pull, see hack/localcluster/images.py).
set -euo pipefail
cd "$(dirname "$0")/.."

kubectl="$(hack/build-binaries.sh kubernetes | sed -n 's/^kubernetes=//p')/kubectl"
if [[ -z "${KUBECONFIG:-}" ]]; then
  .venv/bin/python -m hack.localcluster up
  export KUBECONFIG="$PWD/.cluster/kubeconfig"
  if .venv/bin/python -m hack.sample check; then
    pod=$(.venv/bin/python -m hack.sample up)
    echo
    echo "The sample Gym host gym-demo/$pod is Ready. One rollout: it opens an episode sandbox through NeMo"
    echo "Gym's AsyncSandbox and the gymsandbox provider, runs the task's tests on the reference solution:"
    .venv/bin/python -m hack.sample rollout
    echo
    echo "Post another:   .venv/bin/python -m hack.sample rollout"
    echo "  or, with your own solution:"
    echo "  KUBECONFIG=$KUBECONFIG $kubectl -n gym-demo exec -i $pod -- \\"
    echo "    sh -c 'cat > /tmp/s.py && python3 /opt/gym-host/server.py post /tmp/s.py' < solution.py"
    echo "Following the leading operator's log; Ctrl-C stops following (the cluster keeps running: make cluster-down)."
    # Two operator pods run; the one whose name begins the Lease's holder identity acts, the other waits.
    holders=$("$kubectl" get lease -n gymsandbox-system -l app.kubernetes.io/managed-by=gymsandbox \
      -o jsonpath='{range .items[*]}{.spec.holderIdentity}{"\n"}{end}' 2>/dev/null || true)
    for holder in $holders; do
      if "$kubectl" get pod -n gymsandbox-system "${holder%%_*}" >/dev/null 2>&1; then
        exec "$kubectl" logs -f -n gymsandbox-system "${holder%%_*}"
      fi
    done
    exec "$kubectl" logs -f -n gymsandbox-system deploy/gymsandbox-operator
  fi
  echo "So the operator runs here instead, against the local control plane's kwok nodes."
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
