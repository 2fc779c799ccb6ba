"""Fixtures for tests/e2e: the kind cluster of hack/kind-e2e.sh (`make kind-e2e`), named by KUBECONFIG.

Nothing here starts a cluster. Without KUBECONFIG every test in this directory errors (it is not skipped, so a
run that could not test anything never looks green). `make test` does not collect this directory.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from kubernetes import client, config

from tests.support.namespaces import restricted_namespace

HINT = "run `make kind-e2e` (hack/kind-e2e.sh: kind cluster, image, chart, then these tests with KUBECONFIG)"
# Where hack/kind-e2e.sh installs the chart.
RELEASE = os.environ.get("GYMSANDBOX_E2E_RELEASE", "gymsandbox")
RELEASE_NAMESPACE = os.environ.get("GYMSANDBOX_E2E_NAMESPACE", "gymsandbox-system")


@pytest.fixture(scope="session", autouse=True)
def kubeconfig() -> Path:
    """KUBECONFIG's file; every e2e test errors without it."""
    value = os.environ.get("KUBECONFIG", "")
    if not value:
        pytest.fail(f"KUBECONFIG is not set; these tests need a kind cluster: {HINT}", pytrace=False)
    path = Path(value)
    if not path.is_file():
        pytest.fail(f"KUBECONFIG={value} is not one kubeconfig file: {HINT}", pytrace=False)
    return path


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> client.ApiClient:
    api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return cast(client.ApiClient, api)


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def apps(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture(scope="session")
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def networking(api_client: client.ApiClient) -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api_client)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace that enforces Pod Security `restricted`, deleted afterwards."""
    yield from restricted_namespace(core, f"e2e-{uuid.uuid4().hex[:8]}")


CLAIM = "gym-storage"


@pytest.fixture
def claim(core: client.CoreV1Api, namespace: str) -> str:
    """A claim of the cluster's default StorageClass. kind's binds only once a pod uses it (volume binding
    mode WaitForFirstConsumer), so this also checks that the claim does not stop the host from starting."""
    pvc = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=CLAIM),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )
    core.create_namespaced_persistent_volume_claim(namespace, pvc)
    return CLAIM
