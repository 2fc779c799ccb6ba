"""Attack on the broker's exec target: the broker used to exec into whatever pod an episode's
`status.podName` named, so whoever could write that status (a compromised status writer, an RBAC slip)
could run commands in any pod of the namespace with the broker's cluster-wide `pods/exec`. Now it execs only
into the pod the operator names for that episode, controlled by that episode's uid, labelled a sandbox."""

from __future__ import annotations

import httpx
import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from tests.cluster_fixtures import Cluster, cluster_script
from tests.integration.episodes import Episodes
from tests.security.broker_calls import bearer, ready_episode

pytestmark = pytest.mark.integration


def test_exec_goes_only_into_the_episodes_own_pod_whatever_its_status_says(
    http: httpx.Client, host_token: str, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    if not cluster.local:
        pytest.skip("kwok's exec (a local process per pod) is what shows where a command ran")
    episodes = Episodes(api_client, namespace)
    attacker = ready_episode(http, host_token, episodes, kwok_exec=True)
    victim = ready_episode(http, host_token, episodes, kwok_exec=True)
    exec_root = cluster_script.Paths(cluster_script.STATE_DIR).exec / namespace  # type: ignore[attr-defined]
    workdirs = {name: exec_root / f"{name}-sandbox" for name in (attacker, victim)}
    # The attacker's status now names the victim's pod (as a compromised status writer would set it).
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "episodesandboxes", attacker, {"status": {"podName": f"{victim}-sandbox"}}
    )
    answer = http.post(
        f"/v1/episodes/{attacker}/exec",
        json={"argv": ["touch", "pwned"]},
        headers=bearer(host_token),
    )
    assert (answer.status_code, answer.json()["code"]) == (409, "conflict"), answer.text
    assert f"its status names pod {victim}-sandbox" in answer.json()["message"]
    assert not (workdirs[victim] / "pwned").exists(), "the command ran in the victim's pod"
    assert not (workdirs[attacker] / "pwned").exists()
