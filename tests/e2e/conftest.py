"""Fixtures for tests/e2e: the kind cluster of hack/kind-e2e.sh (`make kind-e2e`), named by KUBECONFIG.

Nothing here starts a cluster. Without KUBECONFIG every test in this directory errors (it is not skipped, so a
run that could not test anything never looks green). `make test` does not collect this directory.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar, cast

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

HINT = "run `make kind-e2e` (hack/kind-e2e.sh: kind cluster, image, chart, then these tests with KUBECONFIG)"
# Where hack/kind-e2e.sh installs the chart.
RELEASE = os.environ.get("GYMSANDBOX_E2E_RELEASE", "gymsandbox")
RELEASE_NAMESPACE = os.environ.get("GYMSANDBOX_E2E_NAMESPACE", "gymsandbox-system")
T = TypeVar("T")


def eventually(check: Callable[[], T | None], timeout: float, what: str, *, every: float = 2.0) -> T:
    """The first truthy result of `check`, polled until `timeout` seconds; AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


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
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise


CLAIM = "gym-storage"


@pytest.fixture
def claim(core: client.CoreV1Api, namespace: str) -> Iterator[str]:
    """A PersistentVolumeClaim that is Bound before the GymHost exists: a static hostPath volume on the node.

    The operator creates the host pod only once the claim is Bound, and kind's default StorageClass binds at
    the first consumer (volumeBindingMode WaitForFirstConsumer), so a dynamically provisioned claim would
    never bind here. A pre-bound static volume (no StorageClass) keeps this test about the operator.
    """
    volume_name = f"{namespace}-storage"
    volume = client.V1PersistentVolume.from_dict(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume_name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": CLAIM},
                "hostPath": {"path": f"/var/local/gymsandbox-e2e/{namespace}", "type": "DirectoryOrCreate"},
            },
        }
    )
    pvc = client.V1PersistentVolumeClaim.from_dict(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": volume_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    assert volume is not None
    assert pvc is not None
    core.create_persistent_volume(volume)
    try:
        core.create_namespaced_persistent_volume_claim(namespace, pvc)

        def bound() -> bool:
            status = core.read_namespaced_persistent_volume_claim(CLAIM, namespace).status
            return status is not None and status.phase == "Bound"

        eventually(bound, 60, f"PersistentVolumeClaim {namespace}/{CLAIM} to bind to {volume_name}")
        yield CLAIM
    finally:
        try:
            core.delete_persistent_volume(volume_name)
        except ApiException as e:
            if e.status != 404:
                raise
