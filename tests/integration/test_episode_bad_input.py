"""Bad EpisodeSandboxes: refused by the API server (schema, CEL) or shown as Ready=False with a named reason,
never given a pod, and never crashing the operator."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.episodes import EPISODE_IMAGE, Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

# spec fields, words the API server's refusal contains
REFUSED_BY_API_SERVER: dict[str, tuple[dict[str, Any], str]] = {
    "named-user": ({"user": "root"}, "spec.user"),
    "root-user": ({"user": 0}, "spec.user"),
    "env-name-with-equals": ({"env": [{"name": "A=B", "value": "x"}]}, "spec.env[0].name"),
    "credential-env-name": ({"env": [{"name": "HF_TOKEN", "value": "x"}]}, "looks like a credential"),
    "credential-env-name-with-dashes": (
        {"env": [{"name": "API-KEY", "value": "x"}]},
        "looks like a credential",
    ),
    "invalid-label-value": ({"labels": {"team": "not a label value!"}}, "spec.labels.team"),
    "invalid-label-key": ({"labels": {"-bad": "x"}}, "label keys must be plain names"),
    "prefixed-label-key": ({"labels": {"gymsandbox.dev/episode": "x"}}, "label keys must be plain names"),
    "missing-rollout-id": ({"rolloutId": None}, "spec.rolloutId"),
    "bad-rollout-id": ({"rolloutId": "has spaces"}, "spec.rolloutId"),
    "relative-workdir": ({"workdir": "tmp"}, "spec.workdir"),
    "workspace-sub-path": (
        {"workspace": {"subPath": "environments/swe-env-1.4.2"}},
        'unknown field "spec.workspace.subPath"',
    ),
    "relative-workspace-mount": ({"workspace": {"mountPath": "work"}}, "spec.workspace.mountPath"),
    "dot-dot-workspace-mount": (
        {"workspace": {"mountPath": "/x/../workspace"}},
        "must be a path in normal form",
    ),
    "ttl-zero": ({"lifetime": {"ttlSeconds": 0}}, "spec.lifetime.ttlSeconds"),
    "bad-quantity": ({"resources": {"memory": "lots"}}, "spec.resources.memory"),
    # to the kubelet a limit of 0 is none: the sandbox would have the node's whole memory and CPU
    "zero-memory": ({"resources": {"memory": "0"}}, "must be more than 0"),
    "zero-ephemeral-storage": ({"resources": {"ephemeralStorage": "0Gi"}}, "must be more than 0"),
    "egress-wildcard": ({"egress": {"allow": ["*.example.com:443"]}}, "spec.egress.allow[0]"),
}

# spec fields (or a different host), Ready reason, words in the message
REFUSED_BY_OPERATOR: dict[str, tuple[dict[str, Any], str, str]] = {
    "unknown-host": ({"hostRef": {"name": "no-such-host"}}, "HostNotFound", "no-such-host"),
    "unapproved-image": ({"image": "docker.io/evil/miner:1"}, "ImageNotApproved", "approved list"),
    "image-not-in-host-list": (
        {"image": "registry.example.com/episodes/other:1"},
        "ImageNotApproved",
        "episodes.images",
    ),
    "ttl-over-host-cap": ({"lifetime": {"ttlSeconds": 7200}}, "TTLOverCap", "1800"),
    "resources-over-cap": ({"resources": {"cpu": "64"}}, "ResourcesOverCap", "cpu"),
    "gpu-over-cap": ({"resources": {"gpu": 1}}, "ResourcesOverCap", "gpu"),
    "memory-under-floor": ({"resources": {"memory": "1Mi"}}, "ResourcesUnderFloor", "memory"),
    "runtime-not-allowed": ({"runtime": "crun"}, "UnknownRuntime", "crun"),
    "egress-wider-than-host": (
        {"egress": {"allow": ["203.0.0.0/16:443"]}},
        "EgressNotSubset",
        "203.0.0.0/16",
    ),
    "egress-other-port": ({"egress": {"allow": ["203.0.113.5:80"]}}, "EgressNotSubset", "203.0.113.5:80"),
    "egress-private": ({"egress": {"allow": ["10.0.0.1:443"]}}, "EgressInvalid", "10.0.0.1"),
}


def _manifest(name: str, changes: dict[str, Any]) -> dict[str, Any]:
    manifest = episode(name)
    for field, value in changes.items():
        if value is None:
            manifest["spec"].pop(field, None)
        else:
            manifest["spec"][field] = value
    return manifest


@pytest.mark.parametrize("case", sorted(REFUSED_BY_API_SERVER))
def test_api_server_refuses_bad_episode_with_a_clear_message(
    cluster: Cluster, crds: None, namespace: str, case: str
) -> None:
    changes, expected = REFUSED_BY_API_SERVER[case]
    result = cluster.kubectl_run(
        "apply", "-n", namespace, "-f", "-", stdin=json.dumps(_manifest("bad", changes)), check=False
    )
    assert result.returncode != 0, f"{case} was accepted"
    assert expected in result.stderr, result.stderr


@pytest.fixture
def host_ready(cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts) -> None:
    apply(cluster, namespace, *sample())
    hosts.wait_reason("swe-gym-run-1", "HostReady")


@pytest.mark.parametrize("case", sorted(REFUSED_BY_OPERATOR))
def test_operator_refuses_bad_episode_with_a_named_reason_and_makes_nothing(
    host_ready: None,
    operator: OperatorProcess,
    api_client: client.ApiClient,
    namespace: str,
    hosts: Hosts,
    case: str,
) -> None:
    changes, reason, words = REFUSED_BY_OPERATOR[case]
    episodes = Episodes(api_client, namespace)
    episodes.create(_manifest("bad", changes))
    eventually(lambda: episodes.ready_reason("bad") == reason, timeout=15, what=f"Ready reason {reason}")
    bad = episodes.get("bad") or {}
    assert words in episodes.condition(bad, "Ready")["message"]
    assert bad["status"]["failure"]["reason"] == reason
    assert not bad["status"].get("admittedAt")
    assert not any(hosts.children_of_episodes().values()), "a refused episode must leave nothing behind"
    core = client.CoreV1Api(api_client)
    about = f"involvedObject.uid={bad['metadata']['uid']},type=Warning"
    eventually(
        lambda: (
            reason in {e.reason for e in core.list_namespaced_event(namespace, field_selector=about).items}
        ),
        timeout=15,
        what=f"a Warning event {reason} about the episode",
    )
    assert operator.process.poll() is None


def test_image_cannot_change_after_creation(
    host_ready: None, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    episodes = Episodes(api_client, namespace)
    episodes.create(episode("fixed"))
    changed = episode("fixed")
    changed["spec"]["image"] = EPISODE_IMAGE.replace("3.12", "3.13")
    result = cluster.kubectl_run("apply", "-n", namespace, "-f", "-", stdin=json.dumps(changed), check=False)
    assert result.returncode != 0
    assert "image is immutable" in result.stderr
