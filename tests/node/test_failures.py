"""Failures for real: what a trainer reads in a host's status when its container crashes, runs out of memory,
has no image or asks for a runtime the node lacks, as the real kubelet reports it (no hand-patched status)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hack.localcluster.nodeconfig import REAL_NODE_LABEL
from kubernetes import client
from tests.node.conftest import SHELL_IMAGE, Volume, node_host
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, host_wait_seconds
from tests.support.processes import OperatorProcess
from tests.support.scrape import scrape

HANDLERLESS = "gs-handlerless"  # the RuntimeClass of the `handlerless` test profile


def failed_host(
    cluster: Cluster, hosts: Hosts, namespace: str, reason: str, runtime: str = "crun", **spec: Any
) -> dict[str, Any]:
    apply(cluster, namespace, node_host("failing", runtime, **spec))
    return hosts.wait_reason("failing", reason, timeout=host_wait_seconds(120))["status"]


def test_crashing_host_reports_its_real_log_tail(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, volume: Volume
) -> None:
    script = "echo loading tasks; echo 'fatal: task set verified-50 not found' >&2; exit 3"
    labels = {"resource": "gymhosts", "kind": "Workload", "reason": "CrashLoopBackOff"}
    before = scrape(operator.metrics_url).value("gymsandbox_failures_total", **labels)
    status = failed_host(cluster, hosts, namespace, "CrashLoopBackOff", command=["sh", "-c", script])
    failure = status["failure"]
    assert failure["kind"] == "Workload"
    assert "last exit code 3" in failure["message"]
    assert "fatal: task set verified-50 not found" in failure["logsTail"]
    assert "loading tasks" in failure["logsTail"]
    # The real crash is counted as a Workload failure (once per crash the operator reads: a crash-looping
    # host may pass through PodNotReady between two), and the host as failed in its namespace.
    assert scrape(operator.metrics_url).value("gymsandbox_failures_total", **labels) - before >= 1
    eventually(
        lambda: scrape(operator.metrics_url).value(
            "gymsandbox_gymhosts", namespace=namespace, phase="failed"
        ),
        20,
        "the host counted failed",
    )


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


@pytest.fixture
def handlerless_runtime_class(api_client: client.ApiClient) -> Iterator[str]:
    """A RuntimeClass that schedules onto the real node, whose handler containerd there does not have."""
    node_api = client.NodeV1Api(api_client)
    taint = REAL_NODE_LABEL
    body = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": HANDLERLESS},
        "handler": "gs-no-such-runtime",
        "scheduling": {
            "nodeSelector": {taint: "true"},
            "tolerations": [{"key": taint, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        },
    }
    node_api.create_runtime_class(body)
    yield HANDLERLESS
    node_api.delete_runtime_class(HANDLERLESS)


def test_runtime_handler_the_node_lacks_is_named_for_host_and_episode(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    volume: Volume,
    api_client: client.ApiClient,
    handlerless_runtime_class: str,
) -> None:
    """The RuntimeClass exists, so the pod is made, but the kubelet cannot start its sandbox: it says so only
    in a FailedCreatePodSandBox event. Both kinds report that rather than PodNotReady for ever."""
    episodes_spec = {**node_host("x", "crun")["spec"]["episodes"], "runtime": "handlerless"}
    status = failed_host(cluster, hosts, namespace, "RuntimeHandlerMissing", runtime="handlerless",
                         episodes=episodes_spec)  # fmt: skip
    assert status["failure"]["kind"] == "Infrastructure"
    assert "'gs-no-such-runtime'" in status["failure"]["message"]
    assert "Stalled" not in [c["type"] for c in status["conditions"] if c["status"] == "True"]

    episodes = Episodes(api_client, namespace)
    episodes.create(episode("doomed", host="failing", image=SHELL_IMAGE, command=["sleep", "600"]))
    eventually(lambda: episodes.ready_reason("doomed") == "RuntimeHandlerMissing", 60, "episode reason")
    failure = (episodes.get("doomed") or {})["status"]["failure"]
    assert failure["kind"] == "Infrastructure"
    assert "'gs-no-such-runtime'" in failure["message"]
