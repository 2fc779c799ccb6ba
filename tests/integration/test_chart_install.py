"""`helm install` into the real control plane: the release deploys, its pods become Available (kwok plays the
kubelet: the containers do not run here, see `make kind-e2e`), and an upgrade loses neither CRDs nor hosts."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.support.chart import CHART, OPERATOR_NAMESPACE
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def local(cluster: Cluster) -> None:
    """Only the local control plane runs the chart's pods whatever their image (kwok plays them). On another
    cluster fixtures (tests/support/fixtures.py) scale them to zero, since the chart's default image is a
    placeholder; there, `make
    kind-e2e` (tests/e2e) checks the chart's pods with a real image instead."""
    if not cluster.local:
        pytest.skip(
            "KUBECONFIG's cluster: the chart's pods are scaled to zero (placeholder image); "
            "tests/e2e checks them with a real image"
        )


def test_the_release_is_deployed_with_available_deployments(
    local: None, cluster: Cluster, chart_release: str, api_client: client.ApiClient
) -> None:
    status = cluster.helm("status", chart_release, "--namespace", OPERATOR_NAMESPACE, "--output", "json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["info"]["status"] == "deployed"
    apps = client.AppsV1Api(api_client)
    for name in (f"{chart_release}-operator", f"{chart_release}-broker"):
        deployment = apps.read_namespaced_deployment(name, OPERATOR_NAMESPACE)
        assert deployment.status.available_replicas == deployment.spec.replicas, name
    crds = client.ApiextensionsV1Api(api_client).list_custom_resource_definition().items
    assert {"gymhosts.gymsandbox.dev", "episodesandboxes.gymsandbox.dev"} <= {c.metadata.name for c in crds}


def test_an_upgrade_keeps_crds_and_running_hosts(
    local: None,
    cluster: Cluster,
    chart_release: str,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    api_client: client.ApiClient,
) -> None:
    apply(cluster, namespace, *sample())
    hosts.wait_reason("swe-gym-run-1", "HostReady")
    apps = client.AppsV1Api(api_client)
    extensions = client.ApiextensionsV1Api(api_client)
    crd_uid = extensions.read_custom_resource_definition("gymhosts.gymsandbox.dev").metadata.uid
    broker = f"{chart_release}-broker"
    replicas = apps.read_namespaced_deployment(broker, OPERATOR_NAMESPACE).spec.replicas
    upgrade = [
        "upgrade", chart_release, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--reuse-values", "--wait",
    ]  # fmt: skip
    try:
        result = cluster.helm(*upgrade, "--set", f"broker.replicas={replicas + 1}")
        assert result.returncode == 0, result.stderr
        assert apps.read_namespaced_deployment(broker, OPERATOR_NAMESPACE).spec.replicas == replicas + 1
        assert extensions.read_custom_resource_definition("gymhosts.gymsandbox.dev").metadata.uid == crd_uid
        host = hosts.get("swe-gym-run-1")
        assert host is not None
        assert host["metadata"].get("deletionTimestamp") is None
        hosts.wait_reason("swe-gym-run-1", "HostReady")
    finally:
        result = cluster.helm(*upgrade, "--set", f"broker.replicas={replicas}")
        assert result.returncode == 0, result.stderr
