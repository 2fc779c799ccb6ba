"""A thousand episodes in one burst over ten hosts of fifty slots each: the first fifty of each host (in
creation order) take the slots and the rest queue, numbered in order; closing the first wave admits the
second; every episode ever admitted has exactly one Secret, NetworkPolicy and Pod, each controlled by it;
and once the hosts are deleted no episode and no sandbox pod is left."""

from __future__ import annotations

import copy
from collections import Counter
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, LABEL_EPISODE, VERSION
from gymsandbox.desired.labels import SANDBOX_CHILDREN
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, sample, set_path
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

HOSTS = 10
SLOTS = 50
PER_HOST = 100
WAIT = 300.0  # seconds for a wave to settle on 2 cores (it takes well under a minute)


def host_names() -> list[str]:
    return [f"scale-{i:02d}" for i in range(HOSTS)]


def episode_names(host: str) -> list[str]:
    return [f"{host}-ep-{i:03d}" for i in range(PER_HOST)]


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in items}


def ready(item: dict[str, Any]) -> bool:
    return Episodes.condition(item, "Ready").get("reason") == "SandboxReady"


def settled(episodes: Episodes, admitted: set[str], queued: set[str]) -> dict[str, dict[str, Any]] | None:
    """All of `admitted` Ready and all of `queued` numbered, as one listing shows them; else None."""
    live = by_name(episodes.all())
    if not all(name in live and ready(live[name]) for name in admitted):
        return None
    if not all((live.get(name, {}).get("status") or {}).get("queuePosition") for name in queued):
        return None
    return live


def episode_children(api_client: client.ApiClient, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """Every episode Secret, NetworkPolicy and Pod in the namespace, as (kind, plain object)."""
    core, networking = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    listings = [
        ("Secret", core.list_namespaced_secret(namespace, label_selector=SANDBOX_CHILDREN)),
        (
            "NetworkPolicy",
            networking.list_namespaced_network_policy(namespace, label_selector=SANDBOX_CHILDREN),
        ),
        ("Pod", core.list_namespaced_pod(namespace, label_selector=SANDBOX_CHILDREN)),
    ]
    return [
        (kind, item)
        for kind, listing in listings
        for item in api_client.sanitize_for_serialization(listing)["items"]  # type: ignore[no-untyped-call]
    ]


def children_by_episode(api_client: client.ApiClient, namespace: str) -> dict[str, Counter[str]]:
    """Per episode label: how many Secrets, NetworkPolicies and (not terminating) Pods carry it."""
    counts: dict[str, Counter[str]] = {}
    for kind, item in episode_children(api_client, namespace):
        if kind == "Pod" and item["metadata"].get("deletionTimestamp"):
            continue
        label = (item["metadata"].get("labels") or {}).get(LABEL_EPISODE, "")
        counts.setdefault(label, Counter())[kind] += 1
    return counts


def controllers(api_client: client.ApiClient, namespace: str) -> set[str]:
    """The controller uids of every episode child in the namespace."""
    return {
        ref["uid"]
        for _, item in episode_children(api_client, namespace)
        for ref in item["metadata"].get("ownerReferences") or []
        if ref.get("controller")
    }


def counted(hosts: Hosts, name: str, wanted: dict[str, int]) -> bool:
    return bool(((hosts.get(name) or {}).get("status") or {}).get("episodes") == wanted)


@pytest.mark.timeout(900)
def test_a_thousand_episodes_over_ten_capped_hosts(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> None:
    claim, template = sample()
    manifests = []
    for name in host_names():
        manifest = copy.deepcopy({**template, "metadata": {"name": name}})
        set_path(manifest, "spec.episodes.maxConcurrent", SLOTS)
        manifests.append(manifest)
    apply(cluster, namespace, claim, *manifests)
    for name in host_names():
        hosts.wait_reason(name, "HostReady", timeout=120)

    episodes = Episodes(api_client, namespace)
    for i in range(PER_HOST):  # one burst, interleaved over the hosts as a trainer's step asks
        for host in host_names():
            episodes.create(episode(episode_names(host)[i], host=host))

    wanted = {"active": SLOTS, "queued": PER_HOST - SLOTS}
    first = {n for host in host_names() for n in episode_names(host)[:SLOTS]}
    second = {n for host in host_names() for n in episode_names(host)[SLOTS:]}
    live = eventually(
        lambda: settled(episodes, first, second), timeout=WAIT, what="the first wave Ready, the rest queued"
    )
    # FIFO: the first fifty of each host hold its slots, and the queue is numbered in creation order.
    for host in host_names():
        names = episode_names(host)
        assert [n for n in names if (live[n].get("status") or {}).get("admittedAt")] == names[:SLOTS]
        assert [live[n]["status"]["queuePosition"] for n in names[SLOTS:]] == list(
            range(1, PER_HOST - SLOTS + 1)
        )
        eventually(partial(counted, hosts, host, wanted), timeout=30, what=f"{host}'s counts")
    first_uids = {live[n]["metadata"]["uid"] for n in first}
    first_admitted = max(live[n]["status"]["admittedAt"] for n in first)

    for name in sorted(first):  # the evaluators close the first wave
        episodes.delete(name)
    live = eventually(lambda: settled(episodes, second, set()), timeout=WAIT, what="the second wave Ready")
    assert not first & set(live), "a closed episode is still listed"
    assert all(live[n]["status"]["admittedAt"] >= first_admitted for n in second)

    # No duplicate child, none missing: one of each per open episode, and no pod of a closed one runs.
    expected = Counter({"Secret": 1, "NetworkPolicy": 1, "Pod": 1})

    def pods_only_of(names: set[str]) -> bool:
        return {label for label, n in children_by_episode(api_client, namespace).items() if n["Pod"]} <= names

    eventually(lambda: pods_only_of(second), timeout=WAIT, what="the first wave's pods gone")
    counts = children_by_episode(api_client, namespace)
    assert {name: counts.get(name) for name in second} == {name: expected for name in second}
    stray_pods = sorted(name for name, n in counts.items() if n["Pod"] and name not in second)
    assert not stray_pods, f"pods of closed episodes still running: {stray_pods[:5]}"
    second_uids = {live[n]["metadata"]["uid"] for n in second}
    assert controllers(api_client, namespace) <= first_uids | second_uids

    # Nothing left behind: deleting the hosts closes their episodes and ends every sandbox pod.
    custom = client.CustomObjectsApi(api_client)
    for name in host_names():
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", name)
    eventually(lambda: not episodes.all(), timeout=WAIT, what="every episode gone with its host")
    eventually(lambda: pods_only_of(set()), timeout=WAIT, what="every sandbox pod gone")
    # The Secrets and NetworkPolicies left are the garbage collector's: each is controlled by an episode.
    assert controllers(api_client, namespace) <= first_uids | second_uids
