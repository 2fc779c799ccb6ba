"""The security tier: the threat model's attacks (docs/security.md), each asserting refusal or
neutralisation and that nothing of the victim changed.

Attacker A controls everything inside a GymHost pod and its episodes and holds that host's lease token;
attacker B is a namespace user who may create GymHosts and EpisodeSandboxes but not Pods or Secrets. Attacks
that need real containers (mounts, egress, exec targets) run on the real node (the `real_node` fixture of
tests/node); admission and API-level attacks run against the shared operator on kwok nodes.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP
from tests.node.conftest import real_node  # noqa: F401 - attacks needing real containers
from tests.support.processes import BrokerProcess


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/security/" in item.nodeid:
            item.add_marker(pytest.mark.security)


ATTACKER_B = "attacker-b"
FLOOD = 48  # concurrent calls from one host in test_broker_flood.py: more than its share


@pytest.fixture
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    """A client of the session's broker, with connections enough for a flood."""
    with httpx.Client(
        base_url=broker.url, timeout=60, limits=httpx.Limits(max_connections=FLOOD + 8)
    ) as session:
        yield session


@pytest.fixture
def attacker_b(api_client: client.ApiClient, namespace: str) -> client.ApiClient:
    """An API client acting as attacker B in `namespace`: a user who may do anything to GymHosts and
    EpisodeSandboxes there (their status excepted) and nothing else, by RBAC the API server enforces."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rule = {"apiGroups": [GROUP], "resources": ["gymhosts", "episodesandboxes"], "verbs": ["*"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": ATTACKER_B}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": ATTACKER_B},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ATTACKER_B},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ATTACKER_B}],
        },
    )
    impersonating = client.ApiClient(api_client.configuration)
    impersonating.set_default_header("Impersonate-User", ATTACKER_B)
    return impersonating
