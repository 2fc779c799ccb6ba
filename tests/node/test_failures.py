"""Failures for real: what a trainer reads in a host's status when its container crashes, runs out of memory
or has no image, as the real kubelet reports it (no hand-patched pod status)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from tests.cluster_fixtures import Cluster, OperatorProcess
from tests.integration.gymhosts import Hosts, apply
from tests.node.conftest import Volume, node_host


def failed_host(cluster: Cluster, hosts: Hosts, namespace: str, reason: str, **spec: Any) -> dict[str, Any]:
    apply(cluster, namespace, node_host("failing", "crun", **spec))
    return hosts.wait_reason("failing", reason, timeout=120)["status"]


def test_crashing_host_reports_its_real_log_tail(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, volume: Volume
) -> None:
    script = "echo loading tasks; echo 'fatal: task set verified-50 not found' >&2; exit 3"
    status = failed_host(cluster, hosts, namespace, "CrashLoopBackOff", command=["sh", "-c", script])
    failure = status["failure"]
    assert failure["kind"] == "Workload"
    assert "last exit code 3" in failure["message"]
    assert "fatal: task set verified-50 not found" in failure["logsTail"]
    assert "loading tasks" in failure["logsTail"]


def test_memory_hog_is_oom_killed_and_reported_so(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, volume: Volume
) -> None:
    # A shell variable that doubles until the 64 MiB limit stops it.
    hog = ["sh", "-c", "x=0123456789abcdef; while :; do x=$x$x; done"]
    resources = {"cpu": "100m", "memory": "64Mi", "ephemeralStorage": "1Gi"}
    status = failed_host(cluster, hosts, namespace, "OOMKilled", command=hog, resources=resources)
    assert status["failure"]["reason"] == "OOMKilled"
    assert "memory limit" in status["failure"]["message"]


def test_image_that_is_not_on_the_node_reports_the_pull_failure(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    volume: Volume,
    core: client.CoreV1Api,
) -> None:
    # No registry answers for localhost/ here (nothing listens on the loopback's 443): the pull fails.
    status = failed_host(cluster, hosts, namespace, "ImagePullBackOff", image="localhost/gymsandbox/absent:1")
    assert status["failure"]["kind"] == "Infrastructure"
    assert "localhost/gymsandbox/absent:1" in status["failure"]["message"]
