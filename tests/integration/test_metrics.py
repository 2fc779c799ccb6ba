"""The operator's /metrics, scraped from the live operator while real flows run on the local control plane:
a queue forms and drains, an episode expires and is reaped, a refusal is counted. Counters are compared
before and after each flow (the operator is shared by the session; tests run one at a time)."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, ready_host, sample
from tests.support.processes import RESYNC_SECONDS, OperatorProcess
from tests.support.scrape import Scrape, scrape

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"


@pytest.fixture
def episodes(api_client: client.ApiClient, namespace: str) -> Episodes:
    return Episodes(api_client, namespace)


def phases(metrics: Scrape, namespace: str, family: str = "gymsandbox_episodes") -> dict[str, float]:
    """Non-zero phase counts for the namespace."""
    names = ("queued", "admitted", "ready", "failed", "pending")
    counts = {phase: metrics.value(family, namespace=namespace, phase=phase) for phase in names}
    return {phase: count for phase, count in counts.items() if count}


def grew(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def test_a_queue_forms_and_drains_in_the_gauges_and_the_latency_histograms(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=1)
    eventually(
        lambda: phases(scrape(operator.metrics_url), namespace, "gymsandbox_gymhosts") == {"ready": 1},
        timeout=15,
        what="the host counted ready",
    )
    before = scrape(operator.metrics_url)
    names = ["ep-0", "ep-1", "ep-2"]
    for name in names:
        episodes.create(episode(name))
    eventually(
        lambda: phases(scrape(operator.metrics_url), namespace) == {"queued": 2, "ready": 1},
        timeout=20,
        what="one episode ready and two queued in gymsandbox_episodes",
    )
    for name in names:
        episodes.wait_ready(name)
        episodes.delete(name)
    eventually(
        lambda: not phases(scrape(operator.metrics_url), namespace), timeout=20, what="the queue drained"
    )
    after = scrape(operator.metrics_url)
    assert grew(before, after, "gymsandbox_episode_admission_seconds_count") == 3
    assert grew(before, after, "gymsandbox_episode_queue_wait_seconds_count") == 2  # ep-1 and ep-2 waited
    assert grew(before, after, "gymsandbox_ready_seconds_count", resource="episodesandboxes") == 3
    # The two that queued waited for ep-0 to become Ready and be closed: more than nothing.
    assert grew(before, after, "gymsandbox_episode_queue_wait_seconds_sum") > 0.2


def test_an_expired_episode_is_counted_as_reaped_with_its_lag(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts)
    before = scrape(operator.metrics_url)
    episodes.create(episode("short", lifetime={"ttlSeconds": 3}))
    eventually(lambda: episodes.get("short") is None, timeout=30, what="the expired episode to be reaped")
    after = scrape(operator.metrics_url)
    labels = {"resource": "episodesandboxes"}
    assert grew(before, after, "gymsandbox_reaps_total", reason="expired", **labels) == 1
    assert grew(before, after, "gymsandbox_reap_lag_seconds_count", **labels) == 1
    assert grew(before, after, "gymsandbox_reap_lag_seconds_sum", **labels) < 10  # the reaper runs every 2 s


def test_a_refusal_is_a_policy_failure_and_the_labels_name_no_object(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts)
    before = scrape(operator.metrics_url)
    episodes.create(episode("refused", image="docker.io/evil/miner:1"))
    eventually(lambda: episodes.ready_reason("refused") == "ImageNotApproved", timeout=20, what="refused")
    labels = {"resource": "episodesandboxes", "kind": "Policy", "reason": "ImageNotApproved"}
    eventually(
        lambda: grew(before, scrape(operator.metrics_url), "gymsandbox_failures_total", **labels) == 1,
        timeout=10,
        what="the refusal counted once",
    )
    eventually(
        lambda: phases(scrape(operator.metrics_url), namespace) == {"failed": 1},
        timeout=10,
        what="the refused episode counted failed at the next tick",
    )
    after = scrape(operator.metrics_url)
    # Cardinality and privacy: no label anywhere holds an object's name or uid.
    uids = {e["metadata"]["uid"] for e in episodes.all()} | {(hosts.get(HOST) or {})["metadata"]["uid"]}
    values = {v for samples in after.families.values() for s in samples for v in s.labels.values()}
    assert not values & ({"refused", HOST} | uids)


def test_a_failure_is_counted_once_however_often_it_is_reconciled(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    claim, host = sample()
    host["spec"]["image"] = "docker.io/evil/miner:1"
    before = scrape(operator.metrics_url)
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(HOST, "ImageNotApproved")
    time.sleep(3 * float(RESYNC_SECONDS))  # three resyncs reconcile the same refusal again
    labels = {"resource": "gymhosts", "kind": "Policy", "reason": "ImageNotApproved"}
    after = scrape(operator.metrics_url)
    assert grew(before, after, "gymsandbox_failures_total", **labels) == 1
    assert grew(before, after, "gymsandbox_reconcile_duration_seconds_count", handler="gymhost_resync") >= 2
    assert phases(after, namespace, "gymsandbox_gymhosts") == {"failed": 1}


def test_api_requests_and_handler_runs_are_measured(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts)
    episodes.create(episode("measured"))
    episodes.wait_ready("measured")
    time.sleep(2.5)  # one more episodes_tick
    metrics = scrape(operator.metrics_url)
    assert metrics.value(
        "gymsandbox_api_requests_total", verb="list", resource="episodesandboxes", code="200"
    )
    assert metrics.value("gymsandbox_api_requests_total", verb="patch", resource="episodesandboxes/status")
    host_writes = {"verb": "patch", "resource": "gymhosts/status"}
    assert metrics.value("gymsandbox_api_request_duration_seconds_count", **host_writes)
    assert metrics.value("gymsandbox_reconcile_duration_seconds_count", handler="episodes_tick")
    assert metrics.value("gymsandbox_reconcile_duration_seconds_count", handler="episode_reconcile")
    assert "gymsandbox_reconciles_in_flight" in metrics.sample_names()
    assert metrics.value("process_resident_memory_bytes") > 0


def test_a_host_pods_events_reach_its_hosts_reconcile(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    """Host pods are watched by label on the API server (handlers/engine.py): deleting one is an event its
    host's reconcile gets, and the host is Ready again with a new pod."""
    ready_host(cluster, namespace, hosts)
    before = scrape(operator.metrics_url)
    cluster.kubectl_run("delete", "pod", f"{HOST}-host", "-n", namespace, "--wait=true")
    counted = "gymsandbox_reconcile_duration_seconds_count"
    eventually(
        lambda: grew(before, scrape(operator.metrics_url), counted, handler="gymhost_pod_changed") >= 1,
        timeout=15,
        what="the host pod's deletion handled",
    )
    hosts.wait_reason(HOST, "HostReady")
