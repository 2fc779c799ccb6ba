"""Attack on the broker's exec target: the broker used to exec into whatever pod an episode's
`status.podName` named, so whoever could write that status (a compromised status writer, an RBAC slip)
could run commands in any pod of the namespace with the broker's cluster-wide `pods/exec`. Now it execs only
into the pod the operator names for that episode, controlled by that episode's uid, labelled a sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from tests.cluster_fixtures import BrokerProcess, Cluster, cluster_script
from tests.integration.episodes import EPISODE_IMAGE, Episodes

pytestmark = pytest.mark.integration


@pytest.fixture
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as session:
        yield session


def ready_episode(http: httpx.Client, token: str, episodes: Episodes) -> str:
    created = http.post(
        "/v1/episodes",
        json={"rolloutId": "r-1", "image": EPISODE_IMAGE},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert created.status_code == 201, created.text
    episode_id = str(created.json()["id"])
    episodes.wait_ready(episode_id)
    return episode_id


def test_exec_goes_only_into_the_episodes_own_pod_whatever_its_status_says(
    http: httpx.Client, host_token: str, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    if not cluster.local:
        pytest.skip("kwok's exec (a local process per pod) is what shows where a command ran")
    episodes = Episodes(api_client, namespace)
    attacker, victim = ready_episode(http, host_token, episodes), ready_episode(http, host_token, episodes)
    paths = cluster_script.Paths(cluster_script.STATE_DIR)  # type: ignore[attr-defined]
    workdirs = {
        name: Path(cluster_script.enable_exec(paths, namespace, f"{name}-sandbox"))  # type: ignore[attr-defined]
        for name in (attacker, victim)
    }
    # The attacker's status now names the victim's pod (as a compromised status writer would set it).
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "episodesandboxes", attacker, {"status": {"podName": f"{victim}-sandbox"}}
    )
    answer = http.post(
        f"/v1/episodes/{attacker}/exec",
        json={"argv": ["touch", "pwned"]},
        headers={"Authorization": f"Bearer {host_token}"},
    )
    assert (answer.status_code, answer.json()["code"]) == (409, "conflict"), answer.text
    assert f"its status names pod {victim}-sandbox" in answer.json()["message"]
    assert not (workdirs[victim] / "pwned").exists(), "the command ran in the victim's pod"
    assert not (workdirs[attacker] / "pwned").exists()
