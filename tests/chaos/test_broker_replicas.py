"""Broker replicas come and go (the chart runs two): whichever replica answers, and after a restart, a closed
or expired episode answers 404 `session_lost`, an id no broker minted answers `episode_not_found`, and a
create retried with the same Idempotency-Key on another replica returns the same episode. No replica keeps
that state in its memory: the episode ids carry a tag of the signing key every replica holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from tests.support.chart import Identities
from tests.support.episodes import EPISODE_IMAGE, Episodes
from tests.support.gymhosts import eventually
from tests.support.processes import BrokerProcess

HOST = "swe-gym-run-1"


@pytest.fixture
def replicas(
    identities: Identities, policy_file: Path, broker: BrokerProcess, tmp_path: Path
) -> Iterator[list[BrokerProcess]]:
    """The session's broker and a second replica of it."""
    second = BrokerProcess.launch(identities.broker, policy_file, tmp_path / "broker-b.log")
    yield [broker, second]
    second.stop()


def call(replica: BrokerProcess, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    return httpx.request(method, f"{replica.url}{path}", headers=headers, timeout=30, **kwargs)


def code(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json().get("code", "")


def test_session_lost_holds_across_replicas_and_restarts(
    replicas: list[BrokerProcess],
    host_token: str,
    identities: Identities,
    policy_file: Path,
    tmp_path: Path,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    a, b = replicas
    body = {"rolloutId": "r-1", "image": EPISODE_IMAGE}
    first = call(a, "POST", "/v1/episodes", host_token, json=body, headers={"Idempotency-Key": "step-7"})
    retried = call(b, "POST", "/v1/episodes", host_token, json=body, headers={"Idempotency-Key": "step-7"})
    assert (first.status_code, retried.status_code) == (201, 200), (first.text, retried.text)
    episode_id = first.json()["id"]
    assert retried.json()["id"] == episode_id
    assert [e["id"] for e in call(b, "GET", "/v1/episodes", host_token).json()["episodes"]] == [episode_id]

    assert call(a, "DELETE", f"/v1/episodes/{episode_id}", host_token).status_code == 200
    assert code(call(b, "GET", f"/v1/episodes/{episode_id}", host_token)) == (404, "session_lost")
    exec_body = {"argv": ["true"]}
    assert code(call(b, "POST", f"/v1/episodes/{episode_id}/exec", host_token, json=exec_body)) == (
        404,
        "session_lost",
    )
    assert call(b, "DELETE", f"/v1/episodes/{episode_id}", host_token).status_code == 200  # idempotent

    # An episode the operator reaps at its TTL is lost too, to a replica that never saw it.
    brief = call(a, "POST", "/v1/episodes", host_token, json={**body, "ttlSeconds": 2}).json()["id"]
    episodes = Episodes(api_client, namespace)
    eventually(lambda: episodes.get(brief) is None, 60, f"{brief} reaped at its TTL")

    b.stop()
    restarted = BrokerProcess.launch(identities.broker, policy_file, tmp_path / "broker-b.log")
    try:
        for lost in (episode_id, brief):
            assert code(call(restarted, "GET", f"/v1/episodes/{lost}", host_token)) == (404, "session_lost")
        never = f"{HOST}-ep-0123456789abcdef01"
        assert code(call(restarted, "GET", f"/v1/episodes/{never}", host_token)) == (404, "episode_not_found")
    finally:
        restarted.stop()
