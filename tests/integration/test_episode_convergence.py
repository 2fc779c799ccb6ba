"""Level-triggered episode status: whatever events were lost, an admitted episode's status comes back to what
its pod says within a resync or two. A lost pod event leaves exactly a stale stored Ready; here the test
writes one (as an admin patching status would), and no event follows it."""

from __future__ import annotations

import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from tests.cluster_fixtures import RESYNC_SECONDS, Cluster, OperatorProcess
from tests.integration.episodes import Episodes, episode
from tests.integration.gymhosts import Hosts, apply, eventually, sample

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"


def test_a_ready_episode_whose_stored_status_went_stale_is_repaired_by_the_drift_pass(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    claim, host = sample()
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(HOST, "HostReady")
    episodes = Episodes(api_client, namespace)
    episodes.create(episode("stale"))
    episodes.wait_ready("stale")
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
