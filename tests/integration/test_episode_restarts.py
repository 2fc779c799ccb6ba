"""The operator is killed or stopped: nothing is duplicated or lost, and expiry still happens.

Each test runs its own operator on its own namespace (the shared one never watches `o-*`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, sample, set_path
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"
EPISODE_LABEL = "gymsandbox.dev/episode"


def _host(cluster: Cluster, namespace: str, max_concurrent: int) -> None:
    claim, host = sample()
    set_path(host, "spec.episodes.maxConcurrent", max_concurrent)
    apply(cluster, namespace, claim, host)


def test_episode_that_expired_while_the_operator_was_stopped_is_reaped_right_after_it_starts(
    cluster: Cluster,
    own_namespace: str,
    start_operator: Callable[[], OperatorProcess],
    api_client: client.ApiClient,
) -> None:
    hosts, episodes = Hosts(api_client, own_namespace), Episodes(api_client, own_namespace)
    first = start_operator()
    _host(cluster, own_namespace, 4)
    hosts.wait_reason(HOST, "HostReady")
    episodes.create(episode("brief", lifetime={"ttlSeconds": 3}))
    episodes.wait_ready("brief")
    first.stop()
    expires_at = datetime.fromisoformat(
        (episodes.get("brief") or {})["status"]["expiresAt"].replace("Z", "+00:00")
    )
    while datetime.now(UTC) < expires_at + timedelta(seconds=3):
        time.sleep(0.5)
    assert episodes.get("brief") is not None, "nothing reaps while the operator is stopped"
    start_operator()
    started = time.monotonic()
    eventually(lambda: episodes.get("brief") is None, timeout=15, what="the overdue episode to be reaped")
    assert time.monotonic() - started < 10


def test_sigkill_while_creating_50_episodes_leaves_exactly_one_of_each_child(
    cluster: Cluster,
    own_namespace: str,
    start_operator: Callable[[], OperatorProcess],
    api_client: client.ApiClient,
    core: client.CoreV1Api,
) -> None:
    hosts, episodes = Hosts(api_client, own_namespace), Episodes(api_client, own_namespace)
    first = start_operator()
    _host(cluster, own_namespace, 50)
    hosts.wait_reason(HOST, "HostReady")
    names = [f"ep-{i:02d}" for i in range(50)]
    creating = threading.Thread(target=lambda: [episodes.create(episode(n)) for n in names])
    creating.start()
    eventually(lambda: len(hosts.children_of_episodes()["pods"]) >= 5, timeout=30, what="some pods")
    first.kill()  # mid-flight: some episodes have a Secret but no Pod yet, some nothing at all
    creating.join(timeout=60)
    start_operator()

    def all_ready() -> bool:
        return all(episodes.condition(e, "Ready").get("status") == "True" for e in episodes.all()) and len(
            episodes.all()
        ) == len(names)

    eventually(all_ready, timeout=120, what="all 50 episodes Ready after the restart")
    networking = client.NetworkingV1Api(api_client)
    selector = "app.kubernetes.io/component=episode"
    for kind, items in {
        "Pod": core.list_namespaced_pod(own_namespace, label_selector=selector).items,
        "Secret": core.list_namespaced_secret(own_namespace, label_selector=selector).items,
        "NetworkPolicy": networking.list_namespaced_network_policy(
            own_namespace, label_selector=selector
        ).items,
    }.items():
        per_episode = Counter(item.metadata.labels[EPISODE_LABEL] for item in items)
        assert sorted(per_episode) == names, f"{kind}: {sorted(per_episode)}"
        assert set(per_episode.values()) == {1}, f"duplicate {kind}s: {per_episode}"
