"""Attacker A, holding its host's token, mints operate leases for an episode: at most 16 until they are
revoked, and a revocation ends every lease granted so far (a leaked co-worker's token stops working)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from kubernetes import client

from gymsandbox.broker.service import MAX_OPERATE_LEASES
from tests.cluster_fixtures import BrokerProcess
from tests.integration.episodes import EPISODE_IMAGE, Episodes

pytestmark = pytest.mark.integration


@pytest.fixture
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as session:
        yield session


def test_operate_leases_are_capped_and_a_revocation_ends_them_all(
    http: httpx.Client, host_token: str, api_client: client.ApiClient, namespace: str
) -> None:
    host = {"Authorization": f"Bearer {host_token}"}
    created = http.post("/v1/episodes", json={"rolloutId": "r-1", "image": EPISODE_IMAGE}, headers=host)
    assert created.status_code == 201, created.text
    episode_id = created.json()["id"]
    Episodes(api_client, namespace).wait_ready(episode_id)
    leases = f"/v1/episodes/{episode_id}/leases"
    granted = [http.post(leases, json={}, headers=host) for _ in range(MAX_OPERATE_LEASES)]
    assert [g.status_code for g in granted] == [201] * MAX_OPERATE_LEASES
    over = http.post(leases, json={}, headers=host)
    assert (over.status_code, over.json()["code"]) == (429, "quota_exceeded"), over.text
    leaked = {"Authorization": f"Bearer {granted[0].json()['token']}", "X-Rollout-Id": "r-1"}
    assert http.get(f"/v1/episodes/{episode_id}", headers=leaked).status_code == 200
    # An operate lease cannot revoke; the host can.
    refused = http.delete(leases, headers=leaked)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    revoked = http.delete(leases, headers=host)
    assert revoked.status_code == 200, revoked.text
    after = http.get(f"/v1/episodes/{episode_id}", headers=leaked)
    assert (after.status_code, after.json()["message"]) == (403, "this operate lease was revoked")
    fresh = http.post(leases, json={}, headers=host)
    assert fresh.status_code == 201, fresh.text
    renewed = {"Authorization": f"Bearer {fresh.json()['token']}", "X-Rollout-Id": "r-1"}
    assert http.get(f"/v1/episodes/{episode_id}", headers=renewed).status_code == 200
