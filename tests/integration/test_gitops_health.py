"""The Argo CD health script (docs/gitops/gymsandbox-health.lua) on live objects: made through the API server,
reconciled by the running operator, read back as Argo CD would see them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.test_gymhost import POD_FAILURES, _patch_container_status
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gitops_health import Health, assess
from tests.support.gymhosts import Hosts, apply, eventually, sample, set_path
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

NAME = "swe-gym-run-1"


def judged(live: Mapping[str, Any]) -> Health:
    """The script's verdict on a live object the operator has written, which kstatus must share: Degraded
    exactly when Stalled=True (Flux: Failed), Progressing exactly when Reconciling=True (Flux: InProgress)."""
    health = assess(live)
    conditions = {c["type"]: c["status"] for c in live["status"]["conditions"]}
    assert (conditions["Stalled"] == "True") is (health.status == "Degraded"), conditions
    assert (conditions["Reconciling"] == "True") is (health.status == "Progressing"), conditions
    return health


def host_health(hosts: Hosts, reason: str) -> Health:
    """Wait for Ready's `reason`, then judge the GymHost as read back from the API server."""
    return judged(hosts.wait_reason(NAME, reason, timeout=30))


def apply_sample(cluster: Cluster, namespace: str, changes: Mapping[str, Any] | None = None) -> None:
    """The sample PVC and GymHost with `changes` (dotted paths; `claim.` ones go to the PVC)."""
    claim, host = sample()
    for path, value in (changes or {}).items():
        set_path(claim if path.startswith("claim.") else host, path.removeprefix("claim."), value)
    apply(cluster, namespace, claim, host)


def test_ready_host_is_healthy(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    apply_sample(cluster, namespace)
    health = host_health(hosts, "HostReady")
    assert health == Health("Healthy", "HostReady: the host serves on its endpoint")


@pytest.mark.parametrize(
    ("changes", "reason", "words"),
    [
        ({"claim.spec.storageClassName": "manual"}, "PersistentVolumeClaimNotBound", "gym-storage"),
        ({"spec.runtime": "nowhere"}, "Unschedulable", "node"),
        ({"spec.runtime": "ghost"}, "RuntimeClassNotFound", "ghost-runtime"),
    ],
    ids=["unbound-claim", "no-matching-node", "missing-runtime-class"],
)
def test_host_waiting_on_the_cluster_is_progressing_with_its_reason(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    changes: dict[str, Any],
    reason: str,
    words: str,
) -> None:
    apply_sample(cluster, namespace, changes)
    live = hosts.wait_reason(NAME, reason)
    assert live["status"]["failure"]["kind"] == "Infrastructure"  # retried: it heals when the cluster does
    health = assess(live)
    assert health.status == "Progressing"
    assert health.message.startswith(f"{reason}: ")
    assert words in health.message


def test_refused_host_is_degraded_naming_the_reason(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    apply_sample(cluster, namespace, {"spec.image": "docker.io/evil/miner:1"})
    health = host_health(hosts, "ImageNotApproved")
    assert health.status == "Degraded"
    assert health.message.startswith("ImageNotApproved: ")
    assert "docker.io/evil/miner:1" in health.message


def test_crash_looping_host_is_degraded(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> None:
    apply_sample(cluster, namespace)
    assert host_health(hosts, "HostReady").status == "Healthy"
    _patch_container_status(core, namespace, cast(dict[str, Any], POD_FAILURES["CrashLoopBackOff"]))
    health = host_health(hosts, "CrashLoopBackOff")
    assert health == Health("Degraded", "CrashLoopBackOff: container gym keeps crashing (last exit code 1)")


def test_expired_retained_host_is_degraded(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    apply_sample(cluster, namespace, {"spec.lifetime": {"ttlSeconds": 3, "expiryPolicy": "Retain"}})
    health = host_health(hosts, "Expired")
    assert health.status == "Degraded"
    assert health.message.startswith("Expired: ")


def test_host_the_operator_has_not_seen_is_progressing(
    cluster: Cluster, own_namespace: str, api_client: client.ApiClient
) -> None:
    """No operator watches `own_namespace` here: the object is exactly what the API server stored."""
    apply_sample(cluster, own_namespace)
    live = Hosts(api_client, own_namespace).get(NAME)
    assert live is not None
    assert "status" not in live
    assert assess(live) == Health("Progressing", "waiting for the operator")


def test_spec_change_the_operator_has_not_observed_is_progressing(
    cluster: Cluster,
    own_namespace: str,
    start_operator: Callable[[], OperatorProcess],
    api_client: client.ApiClient,
) -> None:
    hosts = Hosts(api_client, own_namespace)
    first = start_operator()
    apply_sample(cluster, own_namespace)
    assert host_health(hosts, "HostReady").status == "Healthy"
    first.stop()
    apply_sample(cluster, own_namespace, {"spec.env": [{"name": "GYM_TASK_SET", "value": "verified-51"}]})
    live = hosts.get(NAME) or {}
    assert live["metadata"]["generation"] == live["status"]["observedGeneration"] + 1
    assert assess(live) == Health("Progressing", "waiting for the operator")
    start_operator()
    eventually(lambda: assess(hosts.get(NAME) or {}).status == "Healthy", timeout=30, what="Healthy again")
    # Delete it while an operator runs to release its finalizer: the namespace outlives the operators.
    cluster.kubectl_run("delete", "gymhost", NAME, "-n", own_namespace, "--timeout=30s")


def test_episode_health_follows_admission(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    episodes = Episodes(api_client, namespace)
    apply_sample(cluster, namespace, {"spec.episodes.maxConcurrent": 1})
    hosts.wait_reason(NAME, "HostReady")
    episodes.create(episode("holder"))
    episodes.wait_ready("holder")
    assert assess(episodes.get("holder") or {}) == Health("Healthy", "SandboxReady: the sandbox is running")

    episodes.create(episode("queued"))
    eventually(lambda: episodes.ready_reason("queued") == "QueuedConcurrencyLimit", timeout=20, what="queued")
    queued = assess(episodes.get("queued") or {})
    assert queued.status == "Progressing"
    assert queued.message.startswith("QueuedConcurrencyLimit: waiting for a concurrency slot")

    episodes.create(episode("impatient", admissionTimeoutSeconds=1))
    eventually(lambda: episodes.ready_reason("impatient") == "AdmissionTimeout", timeout=20, what="timeout")
    assert assess(episodes.get("impatient") or {}) == Health(
        "Degraded", "AdmissionTimeout: no concurrency slot became free within admissionTimeoutSeconds"
    )


def test_refused_episode_is_degraded(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    episodes = Episodes(api_client, namespace)
    apply_sample(cluster, namespace)
    hosts.wait_reason(NAME, "HostReady")
    episodes.create(episode("outsider", image="registry.example.com/episodes/other:1"))
    eventually(lambda: episodes.ready_reason("outsider") == "ImageNotApproved", timeout=20, what="refusal")
    health = judged(episodes.get("outsider") or {})
    assert health.status == "Degraded"
    assert health.message.startswith("ImageNotApproved: ")
    assert "registry.example.com/episodes/other:1" in health.message
