"""End to end on kind: the image built from this tree, installed by the chart, runs a real GymHost.

Run by `make kind-e2e` (hack/kind-e2e.sh), which needs Docker, kind, helm and kubectl. Nothing in `make test`
collects it, and it has never run on kind where this project is developed (no container engine there). It
was dry-run through hack/kind-e2e.sh against the local kwok control plane, with docker and kind stubbed and
the operator run from the venv: that checks the script, the chart values and these tests' logic, not the
image, the pull of HOST_IMAGE, the RuntimeClass handler, the default StorageClass or a kubelet's probes.

What only a real kubelet shows: the operator and broker images start and become Available under the
chart's restricted security context (read-only root, uid 65532); a GymHost's pod is pulled, passes Pod
Security `restricted`, runs in the profile's RuntimeClass with its sub-path mounts, and passes its HTTP
readiness probe; deleting the GymHost removes every child.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import GROUP, LABEL_HOST, VERSION
from tests.e2e.conftest import RELEASE, RELEASE_NAMESPACE
from tests.support.gymhosts import eventually

pytestmark = pytest.mark.e2e

VALUES = Path(__file__).with_name("kind-values.yaml")
# busybox: a few MB, pullable by any kind node, and it runs as any uid on a read-only root filesystem.
# Its httpd serves /tmp (the pod's emptyDir), where the command first writes the readiness file.
HOST_IMAGE = "docker.io/library/busybox:1.36.1"
HOST_NAME = "e2e-host"
PORT = 8080
READY_TIMEOUT = 300
GONE_TIMEOUT = 120


def gymhost(claim: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GymHost",
        "metadata": {"name": HOST_NAME},
        "spec": {
            "image": HOST_IMAGE,
            "command": ["sh", "-c", f"echo ok > /tmp/health && exec httpd -f -p {PORT} -h /tmp"],
            "port": PORT,
            "readinessPath": "/health",
            "runtime": "crun",
            "storage": {
                "claimName": claim,
                "environment": {"subPath": "environments/e2e", "mountPath": "/env"},
                "workspace": {"mountPath": "/workspace"},
            },
            "resources": {"cpu": "100m", "memory": "64Mi", "ephemeralStorage": "64Mi"},
            "lifetime": {"ttlSeconds": 1800, "expiryPolicy": "Delete"},
        },
    }


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def read_host(custom: client.CustomObjectsApi, namespace: str) -> dict[str, Any] | None:
    try:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", HOST_NAME)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return cast(dict[str, Any], obj)


def children(
    core: client.CoreV1Api, networking: client.NetworkingV1Api, namespace: str
) -> dict[str, list[Any]]:
    """The host's children by kind, found by the label the operator puts on each."""
    selector = f"{LABEL_HOST}={HOST_NAME}"
    return {
        "Pod": core.list_namespaced_pod(namespace, label_selector=selector).items,
        "Service": core.list_namespaced_service(namespace, label_selector=selector).items,
        "Secret": core.list_namespaced_secret(namespace, label_selector=selector).items,
        "NetworkPolicy": networking.list_namespaced_network_policy(namespace, label_selector=selector).items,
    }


@pytest.mark.parametrize("component", ["operator", "broker"])
def test_chart_deployment_is_available(apps: client.AppsV1Api, component: str) -> None:
    name = f"{RELEASE}-{component}"

    def available() -> bool:
        status = apps.read_namespaced_deployment(name, RELEASE_NAMESPACE).status
        conditions = (status.conditions if status else None) or []
        return any(c.type == "Available" and c.status == "True" for c in conditions)

    eventually(available, timeout=120, what=f"Deployment {RELEASE_NAMESPACE}/{name} to be Available")


def test_the_host_image_is_approved_by_the_installed_values() -> None:
    """A precondition of the next test, checked on its own so that a mismatch is not mistaken for a bug."""
    values = yaml.safe_load(VALUES.read_text())

    assert HOST_IMAGE in values["policy"]["approvedImages"]
    assert "crun" in values["policy"]["runtimeProfiles"]


@pytest.mark.timeout(READY_TIMEOUT + GONE_TIMEOUT + 120)
def test_gymhost_becomes_ready_and_deleting_it_removes_its_children(
    custom: client.CustomObjectsApi,
    core: client.CoreV1Api,
    networking: client.NetworkingV1Api,
    namespace: str,
    claim: str,
) -> None:
    created = cast(
        dict[str, Any],
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", gymhost(claim)),
    )
    last: dict[str, Any] = {}

    def ready() -> dict[str, Any] | None:
        obj = read_host(custom, namespace)
        last.clear()
        last.update(obj or {})
        return obj if obj and ready_condition(obj).get("status") == "True" else None

    try:
        host = eventually(ready, timeout=READY_TIMEOUT, what=f"GymHost {namespace}/{HOST_NAME} to be Ready")
    except AssertionError as e:
        raise AssertionError(f"{e}; last status: {(last.get('status') or {})}") from None

    assert host["status"]["endpoint"] == f"http://{HOST_NAME}-host.{namespace}.svc:{PORT}"
    found = children(core, networking, namespace)
    for kind, items in found.items():
        assert items, f"no {kind} labelled {LABEL_HOST}={HOST_NAME}"
        for item in items:
            owners = [(o.kind, o.uid) for o in item.metadata.owner_references or []]
            assert ("GymHost", created["metadata"]["uid"]) in owners, f"{kind} {item.metadata.name}: {owners}"
    (pod,) = found["Pod"]
    assert pod.spec.runtime_class_name == "crun"
    assert pod.status.phase == "Running"

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", HOST_NAME)

    def gone() -> bool:
        left = {kind: len(items) for kind, items in children(core, networking, namespace).items() if items}
        return read_host(custom, namespace) is None and not left

    eventually(
        gone, timeout=GONE_TIMEOUT, what=f"GymHost {namespace}/{HOST_NAME} and its children to be deleted"
    )
