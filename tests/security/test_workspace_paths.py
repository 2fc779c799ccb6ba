"""Attacks on the shared claim through sub-paths. The kubelet follows symlinks inside a volume when it
resolves a subPath, and a spec used to choose every sub-path: a host that planted `/workspace/x -> ../victim`
and asked for an episode whose `workspace.subPath` ran through `x` read and wrote another run's workspace, or
the shared environment (../shared/reference/real-node-findings.md). Now the operator alone chooses writable
sub-paths (.gymsandbox/hosts/<host uid>/..., desired/workspace.py), no spec can name that tree, and no pod
can write a directory that any subPath passes through."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tests.node.conftest import (
    ENVIRONMENT,
    HEALTH_BODY,
    SHELL_IMAGE,
    exec_in,
    make_volume,
    module_namespace,
    node_host,
)
from tests.security.broker_calls import bearer
from tests.security.test_host_references import create_as
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes
from tests.support.gymhosts import Hosts, apply, read_token, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

VICTIM_NOTES = "notes of the victim run\n"


@dataclass(frozen=True)
class SharedClaim:
    """Two runs on one claim on the real node: the victim, and the attacker A controls."""

    namespace: str
    volume: Path
    victim: dict[str, str]  # the host's status (workspaceSubPath, episodesSubPath, ...)
    attacker: dict[str, str]
    attacker_uid: str


@pytest.fixture
def shared_claim(
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SharedClaim]:
    for namespace in module_namespace(core, tmp_path_factory, "claim"):
        for volume in make_volume(cluster, namespace, real_node, tmp_path_factory.mktemp("claim")):
            apply(cluster, namespace, node_host("victim", "crun"), node_host("attacker", "crun"))
            hosts = Hosts(api_client, namespace)
            victim = hosts.wait_reason("victim", "HostReady", timeout=180)
            attacker = hosts.wait_reason("attacker", "HostReady", timeout=180)
            written = exec_in(
                cluster, namespace, "victim-host", "echo notes of the victim run > /workspace/notes"
            )
            assert written.returncode == 0, written.stderr
            yield SharedClaim(
                namespace, volume.path, victim["status"], attacker["status"], attacker["metadata"]["uid"]
            )


def attacker_sh(cluster: Cluster, claim: SharedClaim, script: str) -> tuple[int, str]:
    result = exec_in(cluster, claim.namespace, "attacker-host", script)
    return result.returncode, (result.stdout + result.stderr).strip()


def test_a_host_cannot_redirect_an_episodes_workspace_with_symlinks(
    shared_claim: SharedClaim,
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    http: httpx.Client,
) -> None:
    claim, volume = shared_claim, shared_claim.volume
    victim_workspace = volume / claim.victim["workspaceSubPath"]
    # Attacker A plants symlinks everywhere it can write, towards the victim's workspace and the environment.
    victim_uid = Path(claim.victim["workspaceSubPath"]).parent.name
    code, out = attacker_sh(
        cluster,
        claim,
        # (moving aside whatever already has one of those names)
        "cd /workspace && for n in x episodes env self; do if [ -e $n ]; then mv $n $n.moved; fi; done"
        f" && ln -s ../../{victim_uid}/workspace x"
        f" && ln -s ../../{victim_uid}/workspace episodes"
        " && ln -s ../../../../environments env && ln -s /episodes self",
    )
    assert code == 0, out
    # ... and where its episodes' workspaces appear: read-only, so nothing can be planted there.
    code, out = attacker_sh(cluster, claim, f"ln -s ../../{victim_uid}/workspace /episodes/next")
    assert code != 0
    assert "Read-only file system" in out or "Permission denied" in out, out
    token = read_token(core, claim.namespace, "attacker-lease")
    body = {"rolloutId": "r-1", "image": SHELL_IMAGE, "command": ["sleep", "3600"]}
    # A workspace path is not the host's to give.
    named = {**body, "workspace": {"subPath": "x", "mountPath": "/workspace"}}
    answer = http.post("/v1/episodes", json=named, headers=bearer(token))
    assert answer.status_code == 422, answer.text
    assert "workspace.subPath" in answer.json()["message"]
    created = http.post("/v1/episodes", json={**body, "workspace": {}}, headers=bearer(token))
    assert created.status_code == 201, created.text
    episode_id = created.json()["id"]
    Episodes(api_client, claim.namespace).wait_ready(episode_id, timeout=120)
    # The episode writes into its workspace, and finds it fresh: nothing of the victim's.
    wrote = exec_in(
        cluster, claim.namespace, f"{episode_id}-sandbox", "ls -A /workspace; echo pwned > /workspace/pwned"
    )
    assert (wrote.returncode, wrote.stdout) == (0, ""), wrote.stderr
    view = http.get(f"/v1/episodes/{episode_id}", headers=bearer(token)).json()
    episode_uid = (Episodes(api_client, claim.namespace).get(episode_id) or {})["metadata"]["uid"]
    assert view["workspaceDir"] == episode_uid
    # It landed in the episode's own directory, which the host reads (and cannot write) under /episodes.
    own = volume / claim.attacker["episodesSubPath"] / episode_uid / "pwned"
    assert own.read_text() == "pwned\n"
    code, out = attacker_sh(cluster, claim, f"cat /episodes/{episode_uid}/pwned")
    assert (code, out) == (0, "pwned")
    code, out = attacker_sh(cluster, claim, f"echo more >> /episodes/{episode_uid}/pwned")
    assert code != 0, out
    # Nothing of the victim's, nor of the shared environment, changed.
    assert sorted(p.name for p in victim_workspace.iterdir()) == ["notes"]
    assert (victim_workspace / "notes").read_text() == VICTIM_NOTES
    environment = volume / ENVIRONMENT
    assert sorted(p.name for p in environment.iterdir()) == ["health"]
    assert (environment / "health").read_text() == HEALTH_BODY


def test_a_spec_cannot_name_another_runs_workspace(
    attacker_b: client.ApiClient, api_client: client.ApiClient, cluster: Cluster, namespace: str, hosts: Hosts
) -> None:
    """Attacker B names the victim's workspace tree as its own environment (read-only, so it would read
    the victim's data) or the claim's root: refused by the API server, nothing is created."""
    claim, victim = sample()
    apply(cluster, namespace, claim, victim)
    victim_status = hosts.wait_reason("swe-gym-run-1", "HostReady")["status"]
    for sub_path in (victim_status["workspaceSubPath"], ".gymsandbox", "environments/../.gymsandbox/hosts"):
        _, host = sample()
        host["metadata"] = {"name": "reader"}
        host["spec"]["storage"]["environment"]["subPath"] = sub_path
        with pytest.raises(client.ApiException) as refused:
            create_as(attacker_b, namespace, host)
        assert refused.value.status == 422, refused.value.body
        assert "spec.storage.environment.subPath" in str(refused.value.body)
    assert hosts.get("reader") is None
