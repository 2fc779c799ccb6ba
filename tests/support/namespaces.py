"""Namespaces enforcing Pod Security `restricted`, as the chart's users run theirs: a fresh one per test
(the integration and e2e tiers) or per benchmark run."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from kubernetes import client

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def create_restricted_namespace(
    core: client.CoreV1Api, name: str, labels: Mapping[str, str] | None = None
) -> str:
    """Create it (labelled RESTRICTED, plus `labels`); returns its name."""
    metadata = client.V1ObjectMeta(name=name, labels={**RESTRICTED, **(labels or {})})
    core.create_namespace(client.V1Namespace(metadata=metadata))
    return name


def restricted_namespace(core: client.CoreV1Api, name: str) -> Iterator[str]:
    """Create it, yield its name, delete it (a test may have deleted it itself)."""
    yield create_restricted_namespace(core, name)
    try:
        core.delete_namespace(name)
    except client.exceptions.ApiException as e:
        if e.status != 404:
            raise
