"""The real node leaves the host as it found it: a snapshot before it comes up equals one after it went
down."""

from __future__ import annotations

from typing import Any

import pytest
from hack.localcluster import hoststate
from hack.localcluster import node as local_node
from hack.localcluster.paths import cluster_paths
from kubernetes import client
from tests.node.conftest import shell_pod, wait_pod_ready
from tests.support.cluster import Cluster
from tests.support.gymhosts import apply


def busy_pod(name: str, runtime: str) -> dict[str, Any]:
    pod = shell_pod(name, runtime, ["sh", "-c", "echo hi > /tmp/x; sleep 3600"],
                    volumeMounts=[{"name": "scratch", "mountPath": "/tmp"}])  # fmt: skip
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return pod


def test_node_down_leaves_the_host_as_it_found_it(
    cluster: Cluster, core: client.CoreV1Api, namespace: str, real_node: str
) -> None:
    if not cluster.local:
        pytest.skip("only the local node is this suite's to stop and start")
    paths = cluster_paths()
    local_node.down(paths)
    before = hoststate.snapshot()
    try:
        assert local_node.up(paths)
        # Work that leaves traces while it runs: pods under each runtime, with volumes and networking.
        for runtime in ("crun", "gvisor", "runc"):
            apply(cluster, namespace, busy_pod(f"busy-{runtime}", runtime))
        for runtime in ("crun", "gvisor", "runc"):
            wait_pod_ready(core, namespace, f"busy-{runtime}")
        during = hoststate.snapshot()
        assert hoststate.differences(before, during), "the node changed nothing: the snapshot sees nothing"
        local_node.down(paths)
        after = hoststate.snapshot()
    finally:
        if not local_node.running(paths):
            local_node.up(paths)  # the tier after this test gets its node back
    assert hoststate.differences(before, after) == {}
