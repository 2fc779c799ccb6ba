"""BrokerClient against the real broker, API server and operator: one episode from create to close."""

from __future__ import annotations

import os

import pytest
from hack.localcluster.kwok import enable_exec
from hack.localcluster.paths import cluster_paths
from kubernetes import client

from gymsandbox.client import BrokerClient, BrokerClientError
from tests.support.cluster import Cluster
from tests.support.episodes import EPISODE_IMAGE, Episodes
from tests.support.gymhosts import eventually
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"


def test_the_client_creates_runs_transfers_and_closes_an_episode(
    broker: BrokerProcess, host_token: str, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    with BrokerClient(broker.url, host_token, timeout=30) as broker_client:
        assert broker_client.health().status == "ok"
        episode = broker_client.create_episode("r-1", EPISODE_IMAGE, idempotency_key="k-1", ttl_seconds=300)
        again = broker_client.create_episode("r-1", EPISODE_IMAGE, idempotency_key="k-1", ttlSeconds=300)
        assert (again.id, again.rollout_id, again.image) == (episode.id, "r-1", EPISODE_IMAGE)
        assert [e.id for e in broker_client.list_episodes().episodes] == [episode.id]

        eventually(lambda: broker_client.get_episode(episode.id).ready, timeout=20, what="Ready")
        if cluster.local:
            pod = (Episodes(api_client, namespace).get(episode.id) or {})["status"]["podName"]
            paths = cluster_paths()
            enable_exec(paths, namespace, pod, served=True)

        echoed = broker_client.exec(episode.id, ["echo", "hello"])
        assert (echoed.exit_code, echoed.stdout, echoed.timed_out) == (0, "hello\n", False)

        payload = os.urandom(50_000) + b"\x00\r\n"
        broker_client.put_file(episode.id, "in/a file #1.bin", payload)
        assert broker_client.get_file(episode.id, "in/a file #1.bin") == payload

        first = broker_client.close_episode(episode.id)
        second = broker_client.close_episode(episode.id)
        assert (first.id, first.ready, first.reason) == (episode.id, False, "Closed")
        assert (second.id, second.ready, second.reason) == (episode.id, False, "Closed")

        with pytest.raises(BrokerClientError) as lost:
            broker_client.get_episode(episode.id)
        assert (lost.value.code, lost.value.status) == ("session_lost", 404)
