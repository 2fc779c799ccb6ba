"""The real node's kubelet killed and, a while later, started again, under a running host and episode: once
the node controller gives up on the node, both say Ready=False `NodeUnreachable` (kind Infrastructure: a
trainer masks the sample instead of scoring it), and both are Ready again soon after the kubelet is back,
their containers never restarted. No object needs a nudge."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from hack.localcluster import node as local_node
from hack.localcluster.paths import cluster_paths
from hack.localcluster.processes import Processes
from kubernetes import client

from tests.node.conftest import SHELL_IMAGE, module_host, node_host
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, eventually
from tests.support.processes import OperatorProcess

HOST = "kubelet-restart"
# The node controller's grace period (50 s by default) plus its 5 s monitor period, and some slack.
UNREACHABLE_SECONDS = 90
RECOVER_SECONDS = 60


@pytest.fixture(scope="module")
def host_namespace(
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    if not cluster.local:
        pytest.skip("KUBECONFIG's cluster: its kubelets are not processes started here")
    yield from module_host(cluster, core, api_client, real_node, tmp_path_factory, node_host(HOST, "crun"))


def node_processes() -> Processes:
    return local_node.processes(cluster_paths().node)


def test_kubelet_killed_hosts_and_episodes_report_node_unreachable_and_recover_when_it_returns(
    host_namespace: str, api_client: client.ApiClient, core: client.CoreV1Api
) -> None:
    hosts, episodes = Hosts(api_client, host_namespace), Episodes(api_client, host_namespace)
    episodes.create(episode("on-the-node", host=HOST, image=SHELL_IMAGE, command=["sleep", "3600"]))
    episodes.wait_ready("on-the-node", timeout=120)
    restarts_before = container_restarts(core, host_namespace)
    procs = node_processes()
    os.kill(procs.pids["kubelet"], signal.SIGKILL)
    killed = time.monotonic()
    try:
        host = hosts.wait_reason(HOST, "NodeUnreachable", timeout=UNREACHABLE_SECONDS)
        eventually(
            lambda: episodes.ready_reason("on-the-node") == "NodeUnreachable",
            UNREACHABLE_SECONDS,
            "the episode NodeUnreachable",
        )
        unreachable = time.monotonic() - killed
        assert host["status"]["failure"]["kind"] == "Infrastructure"
        ep = episodes.get("on-the-node") or {}
        assert ep["status"]["failure"]["kind"] == "Infrastructure"
    finally:
        procs.restart("kubelet")
    back = time.monotonic()
    hosts.wait_reason(HOST, "HostReady", timeout=RECOVER_SECONDS)
    episodes.wait_ready("on-the-node", timeout=RECOVER_SECONDS)
    print(
        f"\nkubelet killed: NodeUnreachable after {unreachable:.1f} s; Ready again "
        f"{time.monotonic() - back:.1f} s after it restarted"
    )
    assert container_restarts(core, host_namespace) == restarts_before  # the containers ran on throughout


def container_restarts(core: client.CoreV1Api, namespace: str) -> dict[str, int]:
    return {
        pod.metadata.name: sum(s.restart_count for s in pod.status.container_statuses or [])
        for pod in core.list_namespaced_pod(namespace).items
    }
