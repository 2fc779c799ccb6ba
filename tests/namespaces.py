"""A fresh namespace per test, enforcing Pod Security `restricted`, for the integration and e2e tiers."""

from __future__ import annotations

from collections.abc import Iterator

from kubernetes import client

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def restricted_namespace(core: client.CoreV1Api, name: str) -> Iterator[str]:
    """Create it, yield its name, delete it (a test may have deleted it itself)."""
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=RESTRICTED)))
    yield name
    try:
        core.delete_namespace(name)
    except client.exceptions.ApiException as e:
        if e.status != 404:
            raise
