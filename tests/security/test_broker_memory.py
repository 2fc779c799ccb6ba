"""Attacker A holds the broker's memory with slow uploads of the largest size. Upload bodies used to be read
in full before the caller was even authenticated, so enough slow or large uploads from one host (or from
anything that reaches the broker) would grow it past its memory limit. Now a call reserves its worst case
against its host's share (`max_bytes_per_host`) before the body is read; past the share the answer is 429 at
once, and another host's transfers go on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest
from kubernetes import client

from gymsandbox.broker.service import TRANSFER_ERROR_BYTES, BrokerSettings
from tests.security.broker_calls import bearer, other_host_token, ready_episode
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes
from tests.support.gymhosts import Hosts, eventually
from tests.support.processes import BrokerProcess, OperatorProcess
from tests.support.scrape import scrape

pytestmark = pytest.mark.integration

CHUNK = b"x" * (1024 * 1024)


def trickle(release: threading.Event) -> Iterator[bytes]:
    """A body streamed without a length (so it reserves the whole transfer cap) until `release` is set."""
    while not release.wait(0.5):
        yield CHUNK
    yield CHUNK


def put(http: httpx.Client, token: str, episode_id: str, path: str, content: object) -> httpx.Response:
    return http.put(f"/v1/episodes/{episode_id}/files/{path}", content=content, headers=bearer(token))


def test_a_host_holding_the_brokers_memory_is_capped_and_another_host_keeps_working(
    http: httpx.Client,
    broker: BrokerProcess,
    host_token: str,
    cluster: Cluster,
    operator: OperatorProcess,
    hosts: Hosts,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    if not cluster.local:
        pytest.skip("kwok's exec (a local process per pod) runs the transfers")
    hoarder_token = other_host_token(cluster, namespace, hosts, core, "hoarder")
    episodes = Episodes(api_client, namespace)
    victim_episode = ready_episode(http, host_token, episodes, kwok_exec=True)
    hoarder_episode = ready_episode(http, hoarder_token, episodes, kwok_exec=True)
    settings = BrokerSettings()
    per_upload = settings.max_transfer_bytes + 2 * TRANSFER_ERROR_BYTES
    fits = settings.max_bytes_per_host // per_upload  # largest uploads the host's share holds at once
    release = threading.Event()
    with ThreadPoolExecutor(fits) as pool:
        held: list[Future[httpx.Response]] = [
            pool.submit(put, http, hoarder_token, hoarder_episode, f"held-{i}", trickle(release))
            for i in range(fits)
        ]
        try:

            def all_reserved() -> bool:
                assert not [f for f in held if f.done()], [f.result().text for f in held if f.done()]
                return (
                    scrape(broker.metrics_url).value("gymsandbox_broker_reserved_bytes") >= fits * per_upload
                )

            eventually(all_reserved, 30, f"{fits} uploads holding the host's memory share")
            answer = put(http, hoarder_token, hoarder_episode, "one-more", iter([b"small"]))
            assert answer.status_code == 429, answer.text
            assert "past the host's share" in answer.json()["message"], answer.text
            assert answer.headers["retry-after"] == "1"
            # Another run's host moves its files and runs its commands as usual.
            assert put(http, host_token, victim_episode, "result.bin", CHUNK).status_code == 204
            ran = http.post(
                f"/v1/episodes/{victim_episode}/exec", json={"argv": ["true"]}, headers=bearer(host_token)
            )
            assert ran.json()["exitCode"] == 0, ran.text
        finally:
            release.set()
        assert [f.result().status_code for f in held] == [204] * fits
    # Their memory is given back once they end.
    assert put(http, hoarder_token, hoarder_episode, "after", iter([b"small"])).status_code == 204
