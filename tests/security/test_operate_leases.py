"""Attacker A, holding its host's token, mints operate leases for an episode: at most 16 until they are
revoked, and a revocation ends every lease granted so far (a leaked co-worker's token stops working)."""

from __future__ import annotations

import httpx
import pytest
from kubernetes import client

from gymsandbox.broker.service import MAX_OPERATE_LEASES
from tests.security.broker_calls import bearer, ready_episode
from tests.support.episodes import Episodes

pytestmark = pytest.mark.integration


def test_operate_leases_are_capped_and_a_revocation_ends_them_all(
    http: httpx.Client, host_token: str, api_client: client.ApiClient, namespace: str
) -> None:
    host = bearer(host_token)
    episode_id = ready_episode(http, host_token, Episodes(api_client, namespace))
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
