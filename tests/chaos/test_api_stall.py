"""The API server stalled (its process stopped, then resumed) while episodes are being created: every episode
reaches the truth of its pod soon after, although the pod events of the stall are lost or fail."""

from __future__ import annotations

import re
import time

from kubernetes import client

from tests.chaos.conftest import stall
from tests.cluster_fixtures import Cluster, OperatorProcess
from tests.integration.episodes import Episodes, episode
from tests.integration.gymhosts import Hosts, apply, sample, set_path
from tests.scrape import scrape

HOST = "swe-gym-run-1"
EPISODES = 40
STALL_SECONDS = 45
CONVERGE_SECONDS = 30


def test_every_episode_is_ready_within_30_s_of_a_45_s_api_server_stall(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    api_client: client.ApiClient,
    control_plane_pids: dict[str, int],
) -> None:
    claim, host = sample()
    set_path(host, "spec.episodes.maxConcurrent", EPISODES)
    apply(cluster, namespace, claim, host)
    Hosts(api_client, namespace).wait_reason(HOST, "HostReady")
    episodes = Episodes(api_client, namespace)
    log_offset = len(operator.output())
    for i in range(EPISODES):
        episodes.create(episode(f"ep-{i:02d}"))
    stall(control_plane_pids["kube-apiserver"], STALL_SECONDS)  # the burst is in flight meanwhile
    resumed = time.monotonic()
    requests_at_resume = scrape(operator.metrics_url).value("gymsandbox_api_requests_total")
    while True:
        reasons = {
            e["metadata"]["name"]: Episodes.condition(e, "Ready").get("reason") for e in episodes.all()
        }
        stale = {name: reason for name, reason in reasons.items() if reason != "SandboxReady"}
        if len(reasons) == EPISODES and not stale:
            break
        assert time.monotonic() - resumed < CONVERGE_SECONDS, (stale, pods_ready(api_client, namespace))
        time.sleep(0.5)
    converged = time.monotonic() - resumed
    requests = scrape(operator.metrics_url).value("gymsandbox_api_requests_total") - requests_at_resume
    print(
        f"\n{EPISODES} Ready {converged:.1f} s after a {STALL_SECONDS} s stall, {requests:.0f} API requests"
    )
    log = operator.output()[log_offset:]
    assert "Traceback" not in log, re.findall(r".*failed.*", log)[-5:]


def pods_ready(api_client: client.ApiClient, namespace: str) -> dict[str, str]:
    """Each episode pod's own Ready condition: whether the episode or its pod is behind."""
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    return {
        p.metadata.name: next((c.status for c in p.status.conditions or [] if c.type == "Ready"), "none")
        for p in pods
    }
