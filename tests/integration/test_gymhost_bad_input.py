"""Bad GymHosts: the API server refuses them (schema or CEL) or the operator shows Ready=False with a named
reason and makes nothing. The operator keeps running throughout."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from gymsandbox.client import GymHostFailedError, wait_ready
from tests.integration.test_control_plane import restricted_pod
from tests.support.cluster import Cluster
from tests.support.gymhosts import DELETE, Hosts, apply, sample, set_path
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

NAME = "swe-gym-run-1"

# (spec changes, words the API server's refusal must contain)
REFUSED_BY_API_SERVER: dict[str, tuple[dict[str, Any], str]] = {
    # where the workspace lies on the claim is the operator's choice: a spec that names it is refused
    "workspace-sub-path": (
        {"spec.storage.workspace.subPath": "workspaces/other-run"},
        'unknown field "spec.storage.workspace.subPath"',
    ),
    "dot-dot-sub-path": (
        {"spec.storage.environment.subPath": "environments/../.gymsandbox"},
        "spec.storage.environment.subPath",
    ),
    "reserved-sub-path": (
        {"spec.storage.environment.subPath": ".gymsandbox/hosts"},
        "spec.storage.environment.subPath",
    ),
    "absolute-sub-path": ({"spec.storage.environment.subPath": "/etc"}, "spec.storage.environment.subPath"),
    "equal-mount-paths": ({"spec.storage.workspace.mountPath": "/env"}, "mountPaths must be distinct"),
    "nested-mount-paths": (
        {"spec.storage.workspace.episodesMountPath": "/workspace/episodes"},
        "none may contain another",
    ),
    # compared as written, "/x/../workspace/env" would lie inside the workspace unseen: normal form only
    "dot-dot-mount-path": (
        {"spec.storage.environment.mountPath": "/x/../workspace/env"},
        "must be a path in normal form",
    ),
    "trailing-slash-mount-path": (
        {"spec.storage.workspace.mountPath": "/workspace/"},
        "must be a path in normal form",
    ),
    "mount-path-inside-tmp": ({"spec.storage.workspace.mountPath": "/tmp/workspace"}, "the operator's own"),
    "host-without-port": ({"spec.egress.allow": ["api.example.com"]}, "spec.egress.allow[0]"),
    "port-zero": ({"spec.egress.allow": ["api.example.com:0"]}, "spec.egress.allow[0]"),
    "port-70000": ({"spec.egress.allow": ["api.example.com:70000"]}, "spec.egress.allow[0]"),
    "wildcard-host": ({"spec.egress.allow": ["*.example.com:443"]}, "spec.egress.allow[0]"),
    "endpoint-with-query": (
        {"spec.egress.modelEndpoints": ["https://models.example.com/v1?key=abc"]},
        "spec.egress.modelEndpoints[0]",
    ),
    "credential-env-name": (
        {"spec.env": [{"name": "OPENAI_API_KEY", "value": "x"}]},
        "looks like a credential",
    ),
    "token-env-name": ({"spec.env": [{"name": "HF_TOKEN", "value": "x"}]}, "looks like a credential"),
    "reserved-env-name": ({"spec.env": [{"name": "GYMSANDBOX_BROKER_URL", "value": "x"}]}, "reserved"),
    "bad-quantity": ({"spec.resources.memory": "1Gii"}, "spec.resources.memory"),
    "negative-gpu": ({"spec.resources.gpu": -1}, "spec.resources.gpu"),
    # to the kubelet a limit of 0 is none: the pod would have the node's whole memory and CPU
    "zero-memory": ({"spec.resources.memory": "0"}, "must be more than 0"),
    "zero-cpu": ({"spec.resources.cpu": "0m"}, "must be more than 0"),
    "uppercase-image": ({"spec.image": "Registry.example.com/GYM/Env:1"}, "spec.image"),
    "readiness-path-not-absolute": ({"spec.readinessPath": "health"}, "spec.readinessPath"),
    "port-out-of-range": ({"spec.port": 0}, "spec.port"),
    "ttl-zero": ({"spec.lifetime.ttlSeconds": 0}, "spec.lifetime.ttlSeconds"),
    "unknown-expiry-policy": ({"spec.lifetime.expiryPolicy": "Archive"}, "spec.lifetime.expiryPolicy"),
    "episode-ttls-out-of-order": (
        {"spec.episodes.defaultTTLSeconds": 1200, "spec.episodes.maxTTLSeconds": 600},
        "defaultTTLSeconds must not exceed maxTTLSeconds",
    ),
    "missing-runtime": ({"spec.runtime": DELETE}, "spec.runtime"),
    "missing-storage": ({"spec.storage": DELETE}, "spec.storage"),
    "unknown-field": ({"spec.privileged": True}, "unknown field"),
    "duplicate-env-names": (
        {"spec.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        "Duplicate",
    ),
}

# (spec changes, Ready reason, words the message must contain)
REFUSED_BY_POLICY: dict[str, tuple[dict[str, Any], str, str]] = {
    "unapproved-image": (
        {"spec.image": "docker.io/evil/miner:1"},
        "ImageNotApproved",
        "docker.io/evil/miner:1",
    ),
    "near-miss-image-prefix": (
        {"spec.image": "registry.example.com/gym-evil/x:1"},
        "ImageNotApproved",
        "gym-evil",
    ),
    "unknown-runtime": ({"spec.runtime": "firecracker"}, "UnknownRuntime", "firecracker"),
    "ttl-over-cap": ({"spec.lifetime.ttlSeconds": 90000}, "TTLOverCap", "86400"),
    "cpu-over-cap": ({"spec.resources.cpu": "64"}, "ResourcesOverCap", "cpu"),
    "cpu-under-floor": ({"spec.resources.cpu": "1m"}, "ResourcesUnderFloor", "cpu"),
    "gpu-over-cap": ({"spec.resources.gpu": 1}, "ResourcesOverCap", "gpu"),
    "too-many-egress-entries": (
        {"spec.egress.allow": [f"203.0.113.{i}:443" for i in range(40)]},
        "EgressOverCap",
        "32",
    ),
    "metadata-address": ({"spec.egress.allow": ["169.254.169.254:80"]}, "EgressInvalid", "169.254.169.254"),
    "private-address": ({"spec.egress.allow": ["10.1.2.3:443"]}, "EgressInvalid", "10.1.2.3"),
    "loopback-address": ({"spec.egress.allow": ["127.0.0.1:8080"]}, "EgressInvalid", "127.0.0.1"),
    "everything-cidr": ({"spec.egress.allow": ["0.0.0.0/0:443"]}, "EgressInvalid", "0.0.0.0/0"),
    "unapproved-episode-image": (
        {"spec.episodes.images": ["docker.io/library/python:3.12"]},
        "ImageNotApproved",
        "python:3.12",
    ),
    "episodes-over-cap": ({"spec.episodes.maxConcurrent": 500}, "EpisodesOverCap", "500"),
}


def _bad_sample(changes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    claim, host = sample()
    for path, value in changes.items():
        set_path(host, path, value)
    return claim, host


@pytest.mark.parametrize("case", sorted(REFUSED_BY_API_SERVER))
def test_api_server_refuses_bad_spec_with_a_clear_message(
    cluster: Cluster, crds: None, namespace: str, hosts: Hosts, case: str
) -> None:
    changes, expected = REFUSED_BY_API_SERVER[case]
    _, host = _bad_sample(changes)
    result = apply(cluster, namespace, host, check=False)
    assert result.returncode != 0, f"{case} was accepted"
    assert expected in result.stderr, result.stderr
    assert hosts.get(NAME) is None


@pytest.mark.parametrize("case", sorted(REFUSED_BY_POLICY))
def test_policy_refusal_shows_as_not_ready_and_makes_nothing(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, case: str
) -> None:
    changes, reason, words = REFUSED_BY_POLICY[case]
    apply(cluster, namespace, *_bad_sample(changes))
    obj = hosts.wait_reason(NAME, reason, timeout=15)
    accepted = next(c for c in obj["status"]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", reason)
    assert words in accepted["message"]
    assert obj["status"]["failure"]["kind"] == "Policy"
    assert not any(hosts.children().values()), "a refused GymHost must leave nothing behind"
    events = cluster.kubectl_run(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        "type=Warning",
        "-o",
        "jsonpath={.items[*].reason}",
    ).stdout
    assert reason in events.split()
    assert operator.process.poll() is None, "the operator must survive bad input"


def test_runtime_and_storage_cannot_change(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    claim, host = sample()
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(NAME, "HostReady")
    for path, value, message in [
        ("spec.runtime", "crun", "runtime is immutable"),
        ("spec.storage.workspace.episodesMountPath", "/other", "storage is immutable"),
    ]:
        changed = _bad_sample({path: value})[1]
        result = apply(cluster, namespace, changed, check=False)
        assert result.returncode != 0, f"{path} changed"
        assert message in result.stderr, result.stderr


def test_sdk_raises_with_the_refusal_reason(
    cluster: Cluster, operator: OperatorProcess, namespace: str, api_client: client.ApiClient
) -> None:
    apply(cluster, namespace, *_bad_sample({"spec.image": "docker.io/evil/miner:1"}))
    with pytest.raises(GymHostFailedError) as failed:
        wait_ready(NAME, namespace, timeout=15, api=api_client)
    assert (failed.value.reason, failed.value.kind) == ("ImageNotApproved", "Policy")
    assert "docker.io/evil/miner:1" in failed.value.message


def test_fixing_a_refused_spec_makes_it_ready(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    apply(cluster, namespace, *_bad_sample({"spec.image": "docker.io/evil/miner:1"}))
    hosts.wait_reason(NAME, "ImageNotApproved")
    apply(cluster, namespace, *sample())
    hosts.wait_reason(NAME, "HostReady")


def test_a_child_name_taken_by_someone_else_is_a_conflict_and_is_left_alone(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> None:
    squatter = core.create_namespaced_pod(namespace, restricted_pod(f"{NAME}-host"))
    apply(cluster, namespace, *sample())
    obj = hosts.wait_reason(NAME, "ChildConflict", timeout=20)
    assert f"Pod {NAME}-host already exists" in obj["status"]["failure"]["message"]
    assert core.read_namespaced_pod(f"{NAME}-host", namespace).metadata.uid == squatter.metadata.uid
