"""Calls the security tier makes to the broker, as a host does."""

from __future__ import annotations

import httpx
from hack.localcluster.kwok import enable_exec
from hack.localcluster.paths import cluster_paths
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.episodes import EPISODE_IMAGE, Episodes
from tests.support.gymhosts import Hosts, apply, read_token, sample


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ready_episode(http: httpx.Client, token: str, episodes: Episodes, *, kwok_exec: bool = False) -> str:
    """A new episode under the token's host, Ready; with `kwok_exec`, its pod runs commands as kwok's local
    processes (in a directory of its own: `cluster.py enable_exec`)."""
    created = http.post(
        "/v1/episodes", json={"rolloutId": "r-1", "image": EPISODE_IMAGE}, headers=bearer(token)
    )
    assert created.status_code == 201, created.text
    episode_id = str(created.json()["id"])
    episodes.wait_ready(episode_id)
    if kwok_exec:
        paths = cluster_paths()
        enable_exec(paths, episodes.namespace, f"{episode_id}-sandbox", served=True)
    return episode_id


def other_host_token(
    cluster: Cluster, namespace: str, hosts: Hosts, core: client.CoreV1Api, name: str
) -> str:
    """Another run's host in `namespace` (the sample under `name`), HostReady: its lease token."""
    _, host = sample()
    host["metadata"] = {"name": name}
    apply(cluster, namespace, host)
    hosts.wait_reason(name, "HostReady")
    return read_token(core, namespace, f"{name}-lease")
