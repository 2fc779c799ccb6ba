"""The chart's release that the processes under test take their identities (ServiceAccounts, RBAC) and policy
from: its values (the sample policy plus the tests' profiles, images and test-server network), kubeconfigs
that act as its ServiceAccounts, and the clean-up of its finalizers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hack.localcluster.paths import ROOT
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.samples import sample_policy

# Profiles beyond the sample's, for failure tests: a RuntimeClass that does not exist, one whose handler the
# real node lacks (tests/node/test_failures.py makes it), and a node pool that no node has.
TEST_PROFILES: dict[str, Any] = {
    "ghost": {"runtimeClassName": "ghost-runtime"},
    "handlerless": {"runtimeClassName": "gs-handlerless"},
    "nowhere": {"runtimeClassName": "crun", "nodeSelector": {"gymsandbox.dev/pool": "none-such"}},
}


# The Helm release the operator and broker get their identities (ServiceAccounts, RBAC) and policy from.
OPERATOR_NAMESPACE = os.environ.get("GYMSANDBOX_TEST_RELEASE_NAMESPACE", "gymsandbox-system")


RELEASE = os.environ.get("GYMSANDBOX_TEST_RELEASE", "gymsandbox")


CHART = ROOT / "charts" / "gymsandbox-operator"


TOKEN_SECONDS = 4 * 3600


@dataclass(frozen=True)
class Identities:
    """Kubeconfigs that act as the chart's ServiceAccounts, from TokenRequest: nothing more than its RBAC."""

    operator: Path
    broker: Path


# The node tier's images (hack/localcluster/images.py, loaded into the real node without a registry) and test
# servers (network namespaces on the node's test network, tests/node/servers.py).
TEST_IMAGE_PREFIX = "localhost/gymsandbox/"


TEST_SERVER_CIDR = "10.89.1.0/24"


def chart_values() -> dict[str, Any]:
    """The sample policy (minus `broker`, which the chart sets) plus the test-only runtime profiles, images
    and test-server network."""
    policy = sample_policy()
    policy.pop("broker")
    policy["runtimeProfiles"].update(TEST_PROFILES)
    policy["approvedImages"].append(TEST_IMAGE_PREFIX)
    policy["egress"]["allowedPrivateCIDRs"].append(TEST_SERVER_CIDR)
    return {"policy": policy}


def service_account_kubeconfig(cluster: Cluster, core: client.CoreV1Api, name: str, path: Path) -> Path:
    """A kubeconfig at `path` that acts as ServiceAccount OPERATOR_NAMESPACE/NAME (a TokenRequest token)."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    token = core.create_namespaced_service_account_token(name, OPERATOR_NAMESPACE, request).status.token
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{**server, "name": "cluster"}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "cluster", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def release_finalizers(api: client.ApiClient, namespace_prefixes: tuple[str, ...]) -> None:
    """Drop our finalizer from objects in namespaces no operator watches any more, so that deleting those
    namespaces completes instead of leaving them Terminating on a reused cluster."""
    custom = client.CustomObjectsApi(api)
    for plural in ("gymhosts", "episodesandboxes"):
        for item in custom.list_cluster_custom_object("gymsandbox.dev", "v1alpha1", plural)["items"]:
            meta = item["metadata"]
            if meta["namespace"].startswith(namespace_prefixes) and meta.get("finalizers"):
                try:
                    custom.patch_namespaced_custom_object(
                        "gymsandbox.dev", "v1alpha1", meta["namespace"], plural, meta["name"],
                        {"metadata": {"finalizers": None}},
                    )  # fmt: skip
                except client.ApiException as e:
                    if e.status != 404:  # gone since the listing (its namespace finished deleting): done
                        raise
