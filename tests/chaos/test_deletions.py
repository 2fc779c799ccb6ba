"""Deletions that race admission: a host deleted while its episodes are being admitted, and a namespace
deleted with everything in it. Afterwards nothing of ours is left (no pod, Secret, Service or NetworkPolicy),
nothing waits on a finalizer, and the operator logged no traceback."""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.chaos.faults import HOST, assert_no_traceback, burst
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import GROUP, VERSION, Hosts, eventually
from tests.support.processes import OperatorProcess

EPISODES = 30
GONE_SECONDS = 60


def test_host_deleted_while_its_episodes_are_admitted_leaves_nothing_behind(
    cluster: Cluster, operator: OperatorProcess, namespace: str, api_client: client.ApiClient
) -> None:
    log_offset = len(operator.output())
    episodes = burst(cluster, namespace, api_client, EPISODES)
    custom = client.CustomObjectsApi(api_client)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", HOST)
    started = time.monotonic()
    # Episodes keep arriving for the host that is going away: each is removed with it or refused, never run.
    late = [f"late-{i}" for i in range(10)]
    for name in late:
        episodes.create(episode(name))
    eventually(
        lambda: set(leftovers(api_client, namespace)) <= {"episodesandboxes"}, GONE_SECONDS, "the host gone"
    )
    print(f"\nhost and {EPISODES} episodes gone {time.monotonic() - started:.1f} s after the deletion")

    def late_refused() -> bool:
        left = {e["metadata"]["name"]: Episodes.condition(e, "Ready").get("reason") for e in episodes.all()}
        assert set(left) <= set(late), left
        return all(reason == "HostNotFound" for reason in left.values())

    eventually(late_refused, GONE_SECONDS, "each late episode removed or refused with HostNotFound")
    assert set(leftovers(api_client, namespace)) <= {"episodesandboxes"}  # none of them got a pod
    assert_no_traceback(operator, log_offset)


def test_namespace_deleted_with_everything_in_it_goes_away(
    cluster: Cluster, operator: OperatorProcess, namespace: str, api_client: client.ApiClient
) -> None:
    log_offset = len(operator.output())
    burst(cluster, namespace, api_client, EPISODES)
    core = client.CoreV1Api(api_client)
    core.delete_namespace(namespace)
    started = time.monotonic()

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    eventually(gone, GONE_SECONDS, f"namespace {namespace} gone (no finalizer left waiting)")
    print(f"\nnamespace with a host and {EPISODES} episodes gone {time.monotonic() - started:.1f} s later")
    assert_no_traceback(operator, log_offset)


def leftovers(api_client: client.ApiClient, namespace: str) -> dict[str, list[str]]:
    """What of ours is still in the namespace, by kind."""
    custom = client.CustomObjectsApi(api_client)
    found = Hosts(api_client, namespace).children()
    for plural in ("gymhosts", "episodesandboxes"):
        items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
        found[plural] = [o["metadata"]["name"] for o in items]
    return {kind: names for kind, names in found.items() if names}
