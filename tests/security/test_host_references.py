"""Attacker B names, in its own GymHost, Secrets and claims that are not its to use: another run's lease
Secret (its token would command that run's episodes), a Secret someone else made for something else, a
claim nobody marked for hosts. Each is refused with its reason and no pod; the victim run keeps working.
A Secret labelled for hosts (by whoever may write Secrets) is loaded as before."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from gymsandbox.policy.cluster import USABLE_BY_LABEL
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, ready_host, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

VICTIM = "swe-gym-run-1"


def attacker_host(name: str, **spec: Any) -> dict[str, Any]:
    _, host = sample()
    host["metadata"] = {"name": name}
    host["spec"].update(spec)
    return host


def create_as(api: client.ApiClient, namespace: str, host: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", host)


def make_secret(core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str]) -> None:
    data = {"API_KEY": base64.b64encode(b"sk-someone-elses").decode()}
    core.create_namespaced_secret(namespace, {"metadata": {"name": name, "labels": labels}, "data": data})


@pytest.mark.parametrize(
    ("secret", "words"),
    [
        (f"{VICTIM}-lease", f"envFrom Secret {VICTIM}-lease is the operator's own"),
        ("team-b-credentials", "lacks the label gymsandbox.dev/usable-by=gymhosts"),
        ("no-such-secret", "does not exist"),
    ],
    ids=["another-runs-lease", "unlabelled", "missing"],
)
def test_envfrom_of_a_secret_not_marked_for_hosts_is_refused(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    core: client.CoreV1Api,
    attacker_b: client.ApiClient,
    secret: str,
    words: str,
) -> None:
    ready_host(cluster, namespace, hosts)
    victim_lease = core.read_namespaced_secret(f"{VICTIM}-lease", namespace).data
    make_secret(core, namespace, "team-b-credentials", {})
    create_as(attacker_b, namespace, attacker_host("thief", envFrom=[{"secretRef": {"name": secret}}]))
    refused = hosts.wait_reason("thief", "SecretNotAllowed")
    assert words in refused["status"]["failure"]["message"]
    assert refused["status"]["failure"]["kind"] == "Policy"
    assert not [p for p in hosts.children()["pods"] if p.startswith("thief")]
    assert hosts.ready(VICTIM)["reason"] == "HostReady"
    assert core.read_namespaced_secret(f"{VICTIM}-lease", namespace).data == victim_lease


def test_a_secret_labelled_for_hosts_is_loaded(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> None:
    make_secret(core, namespace, "model-credentials", {USABLE_BY_LABEL: "gymhosts"})
    ready_host(cluster, namespace, hosts, spec__envFrom=[{"secretRef": {"name": "model-credentials"}}])
    pod = core.read_namespaced_pod(f"{VICTIM}-host", namespace)
    assert [s.secret_ref.name for s in pod.spec.containers[0].env_from] == ["model-credentials"]


def snoop_on_another_runs_claim(
    cluster: Cluster, namespace: str, hosts: Hosts, attacker_b: client.ApiClient
) -> dict[str, Any]:
    """Attacker B's GymHost `snoop` naming a claim nobody marked for hosts; returned once it is refused."""
    claim, _ = sample()
    claim["metadata"] = {"name": "other-runs-data"}
    apply(cluster, namespace, claim)
    host = attacker_host("snoop")
    host["spec"]["storage"]["claimName"] = "other-runs-data"
    create_as(attacker_b, namespace, host)
    return hosts.wait_reason("snoop", "ClaimNotAllowed")


def test_a_claim_not_marked_for_hosts_is_refused(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, attacker_b: client.ApiClient
) -> None:
    refused = snoop_on_another_runs_claim(cluster, namespace, hosts, attacker_b)
    assert "PersistentVolumeClaim other-runs-data lacks the label" in refused["status"]["failure"]["message"]
    assert not hosts.children()["pods"]


def test_an_episode_under_a_host_refused_for_its_claim_is_not_admitted(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    core: client.CoreV1Api,
    attacker_b: client.ApiClient,
) -> None:
    """The host's verdict is the whole verdict: an episode under a host refused for its claim would mount
    that claim read-write (and its chosen uid would become the pod's fsGroup over someone else's files)."""
    snoop_on_another_runs_claim(cluster, namespace, hosts, attacker_b)
    episodes = Episodes(attacker_b, namespace)
    episodes.create(episode("snoop-ep", host="snoop"))
    eventually(lambda: episodes.ready_reason("snoop-ep") == "HostNotReady", what="episode snoop-ep refused")
    message = episodes.condition(episodes.get("snoop-ep"), "Ready")["message"]
    assert "GymHost snoop is refused: PersistentVolumeClaim other-runs-data lacks the label" in message
    time.sleep(2)  # a pod made after the refusal was written would show by now
    assert not [
        p.metadata.name
        for p in core.list_namespaced_pod(namespace).items
        if p.metadata.name.startswith("snoop")
    ]
