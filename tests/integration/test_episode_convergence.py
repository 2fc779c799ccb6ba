"""Level-triggered episode status: whatever events were lost, an admitted episode's status comes back to what
its pod says within a resync or two. A lost pod event leaves exactly a stale stored Ready; here the test
writes one (as an admin patching status would), and no event follows it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, sample
from tests.support.processes import RESYNC_SECONDS, OperatorProcess

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"


def ready_episode(
    cluster: Cluster, namespace: str, hosts: Hosts, api_client: client.ApiClient, name: str
) -> Episodes:
    """The sample host, and one episode under it, Ready."""
    claim, host = sample()
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(HOST, "HostReady")
    episodes = Episodes(api_client, namespace)
    episodes.create(episode(name))
    episodes.wait_ready(name)
    return episodes


def test_a_ready_episode_whose_stored_status_went_stale_is_repaired_by_the_drift_pass(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    episodes = ready_episode(cluster, namespace, hosts, api_client, "stale")
    conditions = (episodes.get("stale") or {})["status"]["conditions"]
    for condition in conditions:
        if condition["type"] == "Ready":
            condition.update(status="False", reason="PodNotReady", message="as a lost pod event leaves it")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "episodesandboxes", "stale", {"status": {"conditions": conditions}}
    )
    assert episodes.ready_reason("stale") == "PodNotReady"
    # The pod did not change, so no event will come: only the periodic pass can see the contradiction.
    eventually(
        lambda: episodes.ready_reason("stale") == "SandboxReady",
        timeout=3 * float(RESYNC_SECONDS),
        what="the drift pass to repair the stale Ready",
    )


def test_children_deleted_under_each_host_of_a_namespace_come_back(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    """One drift pass covers every host of the namespace, whichever host's timer runs it."""
    names = [HOST, f"{HOST}-b"]
    for name in names:
        claim, host = sample()
        host["metadata"]["name"] = name
        apply(cluster, namespace, claim, host)
    episodes = Episodes(api_client, namespace)
    for index, name in enumerate(names):
        hosts.wait_reason(name, "HostReady")
        episodes.create(episode(f"under-{index}", host=name))
    for index in range(len(names)):
        episodes.wait_ready(f"under-{index}")
    core, networking = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    uids = {
        "secret": core.read_namespaced_secret("under-0-sandbox-token", namespace).metadata.uid,
        "policy": networking.read_namespaced_network_policy("under-1-sandbox-net", namespace).metadata.uid,
    }
    core.delete_namespaced_secret("under-0-sandbox-token", namespace)
    networking.delete_namespaced_network_policy("under-1-sandbox-net", namespace)

    def made_again() -> bool:
        try:
            secret = core.read_namespaced_secret("under-0-sandbox-token", namespace)
            policy = networking.read_namespaced_network_policy("under-1-sandbox-net", namespace)
        except client.ApiException:
            return False
        return secret.metadata.uid != uids["secret"] and policy.metadata.uid != uids["policy"]

    eventually(made_again, timeout=4 * float(RESYNC_SECONDS), what="both deleted children made again")


def test_an_episodes_edited_network_policy_is_restored_by_the_drift_pass(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    ready_episode(cluster, namespace, hosts, api_client, "opened")
    networking = client.NetworkingV1Api(api_client)

    def rules() -> list[Any]:
        return networking.read_namespaced_network_policy("opened-sandbox-net", namespace).spec.egress or []

    made = rules()
    networking.patch_namespaced_network_policy("opened-sandbox-net", namespace, {"spec": {"egress": [{}]}})
    assert any(not rule.to for rule in rules())  # one empty rule: every destination
    # The policy's own edit is the only event, and no handler watches it: only the periodic pass sees it.
    eventually(
        lambda: rules() == made,
        timeout=4 * float(RESYNC_SECONDS),
        what="the drift pass to restore the edited NetworkPolicy",
    )
