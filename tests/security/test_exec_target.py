"""Attack on the broker's exec target: the broker used to exec into whatever pod an episode's
`status.podName` named, so whoever could write that status (a compromised status writer, an RBAC slip)
could run commands in any pod of the namespace with the broker's cluster-wide `pods/exec`. Now it execs only
into the pod the operator names for that episode, controlled by that episode's uid, labelled a sandbox."""

from __future__ import annotations

import time

import httpx
import pytest
from hack.localcluster.paths import cluster_paths
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from gymsandbox.broker.recent import KEEP_SECONDS
from tests.security.broker_calls import bearer, ready_episode
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes

pytestmark = pytest.mark.integration

ATTEMPTS = 5  # each one races the operator's repair of the status; the broker wins nearly always


def test_exec_goes_only_into_the_episodes_own_pod_whatever_its_status_says(
    http: httpx.Client, host_token: str, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    if not cluster.local:
        pytest.skip("kwok's exec (a local process per pod) is what shows where a command ran")
    episodes = Episodes(api_client, namespace)
    attacker = ready_episode(http, host_token, episodes, kwok_exec=True)
    victim = ready_episode(http, host_token, episodes, kwok_exec=True)
    exec_root = cluster_paths().exec / namespace
    workdirs = {name: exec_root / f"{name}-sandbox" for name in (attacker, victim)}
    # The attacker's status now names the victim's pod (as a compromised status writer would set it). The
    # operator repairs such a status from the pod it observes, so a call may land after the repair: then the
    # command must have run in the attacker's own pod. The attack is retried until the broker sees it, each
    # time once the broker's read of the repaired episode has expired (broker/recent.py).
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(KEEP_SECONDS + 0.1)
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            "episodesandboxes",
            attacker,
            {"status": {"podName": f"{victim}-sandbox"}},
        )
        answer = http.post(
            f"/v1/episodes/{attacker}/exec",
            json={"argv": ["touch", "pwned"]},
            headers=bearer(host_token),
        )
        assert not (workdirs[victim] / "pwned").exists(), "the command ran in the victim's pod"
        if answer.status_code != 200:
            break
        assert (workdirs[attacker] / "pwned").exists(), answer.text
        (workdirs[attacker] / "pwned").unlink()
    assert (answer.status_code, answer.json()["code"]) == (409, "conflict"), answer.text
    assert f"its status names pod {victim}-sandbox" in answer.json()["message"]
    assert not (workdirs[attacker] / "pwned").exists()
