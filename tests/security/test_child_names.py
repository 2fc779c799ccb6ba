"""Attacker B names an EpisodeSandbox after another run's GymHost (or a host after an episode): both kinds
used to name their lease Secret `<name>-lease` and their NetworkPolicy `<name>-egress`, so the two claimed
the same children, and whichever came second was refused (a GymHost could be kept from starting by an
episode made first under its future name). Child names now carry a suffix per owner kind that no other
kind's can end with (desired/names.py CHILD_SUFFIXES). A child an episode controls under a name it does not
want (an earlier version's) is removed by the drift pass."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, eventually, read_token, ready_host
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"
DRIFT_SECONDS = 15  # a drift pass (3 s in tests) and the delete, with room to spare


def test_an_episode_named_after_its_host_runs_beside_it(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    core: client.CoreV1Api,
    attacker_b: client.ApiClient,
) -> None:
    ready_host(cluster, namespace, hosts)
    host_token = read_token(core, namespace, f"{HOST}-lease")
    episodes = Episodes(attacker_b, namespace)
    episodes.create(episode(HOST))
    episodes.wait_ready(HOST)
    status = (episodes.get(HOST) or {})["status"]
    assert status["leaseSecretName"] != f"{HOST}-lease"
    # The host's own children are untouched: its token, its Ready.
    assert read_token(core, namespace, f"{HOST}-lease") == host_token
    hosts.wait_reason(HOST, "HostReady")


def test_an_old_named_child_of_an_episode_is_removed(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    core: client.CoreV1Api,
) -> None:
    ready_host(cluster, namespace, hosts)
    episodes = Episodes(core.api_client, namespace)
    episodes.create(episode("upgraded"))
    episodes.wait_ready("upgraded")
    meta = (episodes.get("upgraded") or {})["metadata"]
    owner = {
        "apiVersion": meta.get("apiVersion", "gymsandbox.dev/v1alpha1"),
        "kind": "EpisodeSandbox",
        "name": "upgraded",
        "uid": meta["uid"],
        "controller": True,
    }
    old_name = "upgraded-lease"  # as an operator before kind-specific names made it
    token = base64.b64encode(b"gs1.an-old-token").decode()
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {
                "name": old_name,
                "ownerReferences": [owner],
                "labels": stored_labels(core, namespace),
            },
            "data": {"token": token},
        },
    )

    def gone() -> bool:
        return not any(s.metadata.name == old_name for s in core.list_namespaced_secret(namespace).items)

    eventually(gone, timeout=DRIFT_SECONDS, what=f"the episode's old-named Secret {old_name} to be removed")
    episodes.wait_ready("upgraded")


def stored_labels(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    """The labels of the episode's current lease Secret: the operator's watch of episode Secrets selects by
    them, so the old-named one is seen as an upgrade would leave it."""
    status_secret = next(
        s for s in core.list_namespaced_secret(namespace).items if s.metadata.name == "upgraded-sandbox-token"
    )
    return dict(status_secret.metadata.labels or {})
