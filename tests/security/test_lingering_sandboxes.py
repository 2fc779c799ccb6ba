"""Attacker B deletes an episode but keeps its pod: a finalizer of its own on the episode, or a delete with
`propagationPolicy: Orphan` (the garbage collector then strips the pod's owner reference and never removes
it). Before, either freed the host's slot while the pod kept running for good; now the operator ends the
pod within seconds, and the slot stays taken until the pod is gone. Every sandbox pod also carries its own
deadline (activeDeadlineSeconds), which the kubelet enforces even with no operator at all."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import GROUP, VERSION
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, eventually, ready_host
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

HOLD = "example.com/hold"
SWEEP_SECONDS = 15  # a resync (3 s in tests) and the pod's termination, with room to spare


def pod_of(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_pod(f"{name}-sandbox", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def watch_slot(core: client.CoreV1Api, episodes: Episodes, namespace: str, kept: str, waiting: str) -> None:
    """Until `kept`'s pod is gone, `waiting` (next in line under a cap of 1) must not be admitted."""
    deadline = time.monotonic() + SWEEP_SECONDS
    while pod_of(core, namespace, kept) is not None:
        admitted = ((episodes.get(waiting) or {}).get("status") or {}).get("admittedAt")
        assert not admitted, f"{waiting} was admitted while {kept}'s pod still runs: the cap was exceeded"
        assert time.monotonic() < deadline, f"{kept}'s pod runs {SWEEP_SECONDS} s after its episode went"
        time.sleep(0.2)
    episodes.wait_ready(waiting)


def test_a_finalizer_held_episode_loses_its_pod_and_keeps_its_slot_until_the_pod_is_gone(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    core: client.CoreV1Api,
    attacker_b: client.ApiClient,
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=1)
    episodes = Episodes(attacker_b, namespace)
    held = episode("held")
    held["metadata"]["finalizers"] = [HOLD]
    episodes.create(held)
    episodes.wait_ready("held")
    episodes.delete("held")
    episodes.create(episode("next"))
    try:
        watch_slot(core, episodes, namespace, "held", "next")
        assert (episodes.get("held") or {})["metadata"].get("deletionTimestamp"), (
            "the finalizer still holds it"
        )
    finally:
        episodes.patch("held", {"metadata": {"finalizers": None}})


def test_an_orphaning_delete_does_not_leave_the_pod_running(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    core: client.CoreV1Api,
    attacker_b: client.ApiClient,
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=1)
    episodes = Episodes(attacker_b, namespace)
    episodes.create(episode("orphaned"))
    episodes.wait_ready("orphaned")
    client.CustomObjectsApi(attacker_b).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, "episodesandboxes", "orphaned", propagation_policy="Orphan"
    )
    episodes.create(episode("next"))
    watch_slot(core, episodes, namespace, "orphaned", "next")
    # Its lease Secret and NetworkPolicy, orphaned alike, are removed too.
    networking = client.NetworkingV1Api(core.api_client)
    eventually(
        lambda: (
            not any(
                s.metadata.name.startswith("orphaned-") for s in core.list_namespaced_secret(namespace).items
            )
            and not any(
                p.metadata.name.startswith("orphaned-")
                for p in networking.list_namespaced_network_policy(namespace).items
            )
        ),
        timeout=SWEEP_SECONDS,
        what="the orphaned episode's Secret and NetworkPolicy to be removed",
    )


def test_a_pod_orphaned_while_the_operator_was_stopped_keeps_its_slot_once_it_starts(
    cluster: Cluster,
    own_namespace: str,
    start_operator: Callable[[], OperatorProcess],
    api_client: client.ApiClient,
    core: client.CoreV1Api,
) -> None:
    """No plan, the first one after a start included, admits into a slot that an orphaned pod holds: the
    episode is gone from every listing, only its pod tells."""
    hosts, episodes = Hosts(api_client, own_namespace), Episodes(api_client, own_namespace)
    first = start_operator()
    ready_host(cluster, own_namespace, hosts, spec__episodes__maxConcurrent=1)
    episodes.create(episode("orphaned"))
    episodes.wait_ready("orphaned")
    first.stop()
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        GROUP, VERSION, own_namespace, "episodesandboxes", "orphaned", propagation_policy="Orphan"
    )
    episodes.create(episode("next"))
    eventually(lambda: episodes.get("orphaned") is None, timeout=10, what="the orphaned episode to go")
    assert pod_of(core, own_namespace, "orphaned") is not None, "nothing ends the pod with no operator"
    start_operator()
    watch_slot(core, episodes, own_namespace, "orphaned", "next")


def test_every_sandbox_pod_carries_a_deadline_no_later_than_its_longest_possible_ttl(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxTTLSeconds=900)
    episodes = Episodes(core.api_client, namespace)
    episodes.create(episode("bounded", lifetime={"ttlSeconds": 60}))
    episodes.wait_ready("bounded")
    deadline = pod_of(core, namespace, "bounded").spec.active_deadline_seconds
    assert deadline is not None
    assert 880 <= deadline <= 900, deadline
