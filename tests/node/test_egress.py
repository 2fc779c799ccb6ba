"""Egress for real: the operator's NetworkPolicies, enforced by kube-network-policies on the real node.

Each blocked target is first shown reachable from a control pod on the same node that has no NetworkPolicy,
so a block below is the policy's doing, not a missing route or a server that is down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hack.localcluster.nodeconfig import API_PROXY_IP, API_PROXY_PORT, NODE_IP
from kubernetes import client
from tests.node.conftest import (
    SHELL_IMAGE,
    exec_in,
    module_host,
    module_namespace,
    node_host,
    shell_pod,
    wait_pod_ready,
)
from tests.node.servers import BODY, RESOLVER_ANSWER, RESOLVER_NAME, Servers, started_servers
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import apply, eventually
from tests.support.processes import OperatorProcess

API_SERVICE = "10.0.0.1:443"
API_PROXY = f"{API_PROXY_IP}:{API_PROXY_PORT}"
KUBELET = f"{NODE_IP}:10250"
CONNECT_SECONDS = 2
REACH_SECONDS = 20


@pytest.fixture(scope="module")
def servers(real_node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    with started_servers(tmp_path_factory.mktemp("servers")) as running:
        yield running


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str


@pytest.fixture(scope="module")
def control(
    cluster: Cluster, core: client.CoreV1Api, real_node: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pod]:
    """A pod on the real node in a namespace without any NetworkPolicy."""
    for namespace in module_namespace(core, tmp_path_factory, "control"):
        pod = shell_pod("control", "crun", ["sleep", "3600"])
        apply(cluster, namespace, pod)
        wait_pod_ready(core, namespace, "control")
        yield Pod(namespace, "control")


@dataclass(frozen=True)
class EgressHost:
    runtime: str
    namespace: str
    name: str
    pod: Pod


@pytest.fixture(scope="module", params=["crun", "gvisor"])
def egress_host(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    servers: Servers,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EgressHost]:
    """A Ready host whose allowlist is exactly the test server's PRIMARY:8080."""
    runtime = request.param
    name = f"{runtime}-egress"
    host = node_host(name, runtime, egress={"allow": [servers.allowed]})
    for namespace in module_host(cluster, core, api_client, real_node, tmp_path_factory, host):
        yield EgressHost(runtime, namespace, name, Pod(namespace, f"{name}-host"))


def connects(cluster: Cluster, pod: Pod, target: str) -> bool:
    """Whether a TCP connection from the pod to HOST:PORT is accepted within CONNECT_SECONDS."""
    host, port = target.rsplit(":", 1)
    result = exec_in(cluster, pod.namespace, pod.name, f"nc -w {CONNECT_SECONDS} {host} {port} </dev/null")
    return result.returncode == 0


def reaches(cluster: Cluster, pod: Pod, target: str) -> bool:
    """Whether the pod connects within REACH_SECONDS, trying again meanwhile. Seen once in CI under gVisor:
    a first connection right after a new pod and NetworkPolicy appeared did not get through (kube-network-
    policies rewrites its rules on such changes and fails closed). Blocks are checked with one try."""
    deadline = time.monotonic() + REACH_SECONDS
    while not connects(cluster, pod, target):
        if time.monotonic() > deadline:
            return False
    return True


def http_get(cluster: Cluster, pod: Pod, target: str) -> str:
    host, port = target.rsplit(":", 1)
    script = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w {CONNECT_SECONDS} {host} {port}"
    result = exec_in(cluster, pod.namespace, pod.name, script)
    return result.stdout


def resolves(cluster: Cluster, pod: Pod, name: str, server: str = "") -> str:
    """The address `nslookup` prints for `name` (through `server` when given), or "" when it fails."""
    result = exec_in(cluster, pod.namespace, pod.name, f"timeout 5 nslookup {name} {server}")
    answers = result.stdout.split("Name:", 1)[1] if "Name:" in result.stdout else ""
    return next((line.split()[-1] for line in answers.splitlines() if line.startswith("Address")), "")


BLOCKED_TARGETS = ["other_port", "other_address", "metadata", "api_service", "api_proxy"]


def target(servers: Servers, which: str) -> str:
    return {"api_service": API_SERVICE, "api_proxy": API_PROXY}.get(which) or str(getattr(servers, which))


@pytest.mark.parametrize("which", ["allowed", *BLOCKED_TARGETS])
def test_control_pod_without_policy_reaches_every_target(
    cluster: Cluster, control: Pod, servers: Servers, which: str
) -> None:
    assert reaches(cluster, control, target(servers, which))


def test_control_pod_queries_the_outside_resolver(cluster: Cluster, control: Pod, servers: Servers) -> None:
    assert resolves(cluster, control, RESOLVER_NAME, servers.resolver) == RESOLVER_ANSWER


def test_allowlisted_host_port_answers(cluster: Cluster, egress_host: EgressHost, servers: Servers) -> None:
    assert reaches(cluster, egress_host.pod, servers.allowed)
    response = http_get(cluster, egress_host.pod, servers.allowed)
    assert response.startswith("HTTP/1.1 200"), response
    assert response.endswith(BODY), response


@pytest.mark.parametrize("which", BLOCKED_TARGETS)
def test_target_outside_the_allowlist_is_unreachable(
    cluster: Cluster, egress_host: EgressHost, servers: Servers, which: str
) -> None:
    assert not connects(cluster, egress_host.pod, target(servers, which))


def test_node_address_and_kubelet_port_are_unreachable(
    cluster: Cluster, egress_host: EgressHost, control: Pod
) -> None:
    # Traffic from pods to the node itself never passes NetworkPolicy's hook here: the node tier's guard
    # table drops it for every pod (the control pod included), as a managed cluster's node firewall would.
    assert not connects(cluster, control, KUBELET)
    assert not connects(cluster, egress_host.pod, KUBELET)


def test_names_resolve_through_cluster_dns_only(
    cluster: Cluster, egress_host: EgressHost, servers: Servers
) -> None:
    assert resolves(cluster, egress_host.pod, "kubernetes.default.svc.cluster.local") == "10.0.0.1"
    assert resolves(cluster, egress_host.pod, RESOLVER_NAME, servers.resolver) == ""


def test_episode_without_egress_reaches_nothing(
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    egress_host: EgressHost,
    servers: Servers,
) -> None:
    episodes = Episodes(api_client, egress_host.namespace)
    name = "no-egress"
    episodes.create(
        episode(name, egress_host.name, image=SHELL_IMAGE, command=["sleep", "3600"], user=65532,
                resources={"cpu": "100m", "memory": "128Mi"})
    )  # fmt: skip
    episodes.wait_ready(name, timeout=120)
    pod_name = (episodes.get(name) or {})["status"]["podName"]
    host_ip = core.read_namespaced_pod(egress_host.pod.name, egress_host.namespace).status.pod_ip
    episode_pod = Pod(egress_host.namespace, pod_name)
    assert reaches(cluster, egress_host.pod, servers.allowed), "the host's own allowlist still works"
    for blocked in (servers.allowed, f"{host_ip}:8080", API_SERVICE):
        assert not connects(cluster, episode_pod, blocked), blocked
    assert resolves(cluster, episode_pod, "kubernetes.default.svc.cluster.local") == ""


def _policy(api_client: client.ApiClient, host: EgressHost) -> Any:
    return client.NetworkingV1Api(api_client).read_namespaced_network_policy(
        f"{host.name}-egress", host.namespace
    )


def test_deleted_network_policy_is_restored_and_enforced_again(
    cluster: Cluster, api_client: client.ApiClient, egress_host: EgressHost, servers: Servers
) -> None:
    networking = client.NetworkingV1Api(api_client)
    old_uid = _policy(api_client, egress_host).metadata.uid
    networking.delete_namespaced_network_policy(f"{egress_host.name}-egress", egress_host.namespace)

    def restored() -> bool:
        try:
            return bool(_policy(api_client, egress_host).metadata.uid != old_uid)
        except client.exceptions.ApiException:
            return False

    eventually(restored, timeout=30, what="the NetworkPolicy restored")
    eventually(lambda: not connects(cluster, egress_host.pod, servers.other_port), 30, "enforcement back")
    assert reaches(cluster, egress_host.pod, servers.allowed)


def test_edited_network_policy_is_reverted_and_enforced_again(
    cluster: Cluster, api_client: client.ApiClient, egress_host: EgressHost, servers: Servers
) -> None:
    networking = client.NetworkingV1Api(api_client)
    opened = {"spec": {"egress": [{}]}}  # one empty rule: allow all egress
    networking.patch_namespaced_network_policy(f"{egress_host.name}-egress", egress_host.namespace, opened)
    eventually(lambda: not connects(cluster, egress_host.pod, servers.other_port), 30, "enforcement back")
    rules = _policy(api_client, egress_host).spec.egress
    assert all(rule.to for rule in rules), "no allow-all rule is left"
    assert reaches(cluster, egress_host.pod, servers.allowed)
