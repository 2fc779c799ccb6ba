"""EpisodeSandbox end to end: FIFO admission under the host's cap, children, reaping, leases."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Cluster, OperatorProcess
from tests.integration.episodes import Episodes, episode
from tests.integration.gymhosts import Hosts, apply, eventually, sample, set_path

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"


@pytest.fixture
def episodes(api_client: client.ApiClient, namespace: str) -> Episodes:
    return Episodes(api_client, namespace)


def ready_host(cluster: Cluster, namespace: str, hosts: Hosts, **changes: Any) -> None:
    claim, host = sample()
    for path, value in changes.items():
        set_path(host, path.replace("__", "."), value)
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(HOST, "HostReady")


def test_never_more_than_the_cap_are_admitted_and_all_reach_ready_in_fifo_order(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=3)
    names = [f"ep-{i:02d}" for i in range(10)]
    for name in names:
        episodes.create(episode(name))
        time.sleep(0.05)  # distinct creation order; FIFO ties break by name anyway
    ready_order: list[str] = []
    max_admitted = 0
    deadline = time.monotonic() + 120
    while len(ready_order) < len(names):
        assert time.monotonic() < deadline, f"only {ready_order} became Ready"
        current = {e["metadata"]["name"]: e for e in episodes.all()}
        admitted = [
            n
            for n, e in current.items()
            if (e.get("status") or {}).get("admittedAt") and not e["metadata"].get("deletionTimestamp")
        ]
        max_admitted = max(max_admitted, len(admitted))
        for name in sorted(current):
            if name not in ready_order and episodes.condition(current[name], "Ready").get("status") == "True":
                ready_order.append(name)
                episodes.delete(name)  # close it: its slot goes to the next in line
        queued = {
            n: (e.get("status") or {}).get("queuePosition") for n, e in current.items() if n not in admitted
        }
        for name, position in queued.items():
            if position is not None:
                assert episodes.condition(current[name], "Admitted").get("reason") in (
                    "QueuedConcurrencyLimit",
                    None,
                )
        time.sleep(0.2)
    assert max_admitted <= 3
    assert ready_order == names
