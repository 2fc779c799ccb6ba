"""The real node leaves the host as it found it: a snapshot before it comes up equals one after it went
down."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from tests import hack_scripts
from tests.cluster_fixtures import Cluster, cluster_script
from tests.integration.gymhosts import apply
from tests.node.conftest import node_script, shell_pod, wait_pod_ready

hoststate = hack_scripts.load("hoststate")


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
    paths = cluster_script.Paths(cluster_script.STATE_DIR)  # type: ignore[attr-defined]
    node_script.down(paths)
    before = hoststate.snapshot()
    try:
        assert node_script.up(paths)
        # Work that leaves traces while it runs: pods under each runtime, with volumes and networking.
        for runtime in ("crun", "gvisor", "runc"):
            apply(cluster, namespace, busy_pod(f"busy-{runtime}", runtime))
        for runtime in ("crun", "gvisor", "runc"):
            wait_pod_ready(core, namespace, f"busy-{runtime}")
        during = hoststate.snapshot()
        assert hoststate.differences(before, during), "the node changed nothing: the snapshot sees nothing"
        node_script.down(paths)
        after = hoststate.snapshot()
    finally:
        if not node_script.running(paths):
            node_script.up(paths)  # the tier after this test gets its node back
    assert hoststate.differences(before, after) == {}
