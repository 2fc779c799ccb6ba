"""Attacker A floods the shared broker with long commands; another run's host keeps working. A's calls beyond
its share (`max_calls_per_host`, 32) are refused at once with 429, so the broker's threads and API
connections stay available to every other host. The victim's exec latency during the attack is printed
(a figure, not a bound: timing belongs to bench/)."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from kubernetes import client

from gymsandbox.broker.service import BrokerSettings
from tests.security.broker_calls import bearer, other_host_token, ready_episode
from tests.security.conftest import FLOOD
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes
from tests.support.gymhosts import Hosts
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration


def timed_exec(http: httpx.Client, token: str, episode_id: str, argv: list[str]) -> tuple[int, float]:
    started = time.monotonic()
    answer = http.post(f"/v1/episodes/{episode_id}/exec", json={"argv": argv}, headers=bearer(token))
    return answer.status_code, time.monotonic() - started


def test_a_host_flooding_the_broker_is_capped_and_another_host_keeps_working(
    http: httpx.Client,
    host_token: str,
    cluster: Cluster,
    operator: OperatorProcess,
    hosts: Hosts,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    if not cluster.local:
        pytest.skip("kwok's exec (a local process per pod) runs the commands")
    flooder_token = other_host_token(cluster, namespace, hosts, core, "flooder")
    episodes = Episodes(api_client, namespace)
    victim_episode = ready_episode(http, host_token, episodes, kwok_exec=True)
    flood_episode = ready_episode(http, flooder_token, episodes, kwok_exec=True)
    quiet = [timed_exec(http, host_token, victim_episode, ["true"])[1] for _ in range(5)]
    with ThreadPoolExecutor(FLOOD + 4) as pool:
        flood = [
            pool.submit(timed_exec, http, flooder_token, flood_episode, ["sleep", "4"]) for _ in range(FLOOD)
        ]
        time.sleep(1)  # the flood is in flight
        during = [timed_exec(http, host_token, victim_episode, ["true"]) for _ in range(5)]
        answers = [f.result()[0] for f in flood]
    cap = BrokerSettings().max_calls_per_host
    assert answers.count(200) <= cap, answers
    assert answers.count(429) >= FLOOD - cap, answers
    assert all(code == 200 for code, _ in during), during
    print(
        f"victim exec p50 {statistics.median(quiet):.3f} s quiet, "
        f"{statistics.median(s for _, s in during):.3f} s during a flood of {FLOOD} from another host "
        f"({answers.count(200)} served, {answers.count(429)} refused with 429)"
    )
