"""Sandbox pods the operator ends itself: those of reaped episodes, and those still running without an open
episode (deleted while a finalizer of someone else's holds it, or with `--cascade=orphan`). Until such a pod
is gone it holds its host's slot: no cap is exceeded by deleting an episode and keeping its pod. Pods are
found and deleted by their episode's and host's uids (desired/labels.py), never by names."""

from __future__ import annotations

from gymsandbox.desired.labels import sandbox_pods_selector
from gymsandbox.kube.client import POD, Kube
from gymsandbox.kube.store import Store
from gymsandbox.policy.queue import lingering_sandboxes

REAP_BATCH = 100  # episodes whose pods one request deletes (a label selector of their uids)


def stop_sandboxes(kube: Kube, pods: Store, namespace: str, episode_uids: list[str]) -> None:
    """End the pods of episodes just reaped at once, a request per REAP_BATCH: the garbage collector would
    get to them at its own pace (some 20 deletions a second), and a sandbox must not outlive its TTL by
    minutes when many expire together. Their Secrets and NetworkPolicies run nothing: the collector's.
    The answers (pods now terminating) go to `pods`."""
    for start in range(0, len(episode_uids), REAP_BATCH):
        for pod in kube.delete_collection(
            POD, namespace, labels=sandbox_pods_selector(set(episode_uids[start : start + REAP_BATCH]))
        ):
            pods.put(pod)


def end_lingering_sandboxes(
    kube: Kube, pods: Store, namespace: str, host_uid: str, open_episodes: set[str]
) -> int:
    """How many of the host's sandbox pods still run although their episode (by uid) is not among
    `open_episodes` (policy/queue.py); those not terminating yet are deleted now.

    Read from `pods`, the sandbox pods' store (grouped by host uid): it holds every pod this process created
    (the create's answer) and every one the watch reported, and loses one only on its deletion event, so a
    running pod is never missed; at worst a pod already gone still holds its slot until the event arrives."""
    lingering = lingering_sandboxes(pods.group(namespace, host_uid), open_episodes)
    stop_sandboxes(kube, pods, namespace, lingering.to_end)
    return lingering.holding
