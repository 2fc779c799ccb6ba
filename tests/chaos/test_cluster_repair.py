"""`make cluster-up` on a local cluster with a dead component: the component is started again as it was (same
flags, port and data), and nothing in the cluster is lost. It used to replace the whole cluster on a new
port, with every GymHost, episode and the chart release gone, and say only "cluster is up"."""

from __future__ import annotations

import json
import os
import signal

import pytest
from hack.localcluster import controlplane
from hack.localcluster.processes import Processes, alive
from kubernetes import client

from tests.support.cluster import Cluster
from tests.support.gymhosts import eventually

FAKE_NODE = "kwok-kata-0"


def test_cluster_up_starts_a_dead_scheduler_again_and_keeps_every_object(
    cluster: Cluster,
    control_plane: Processes,
    core: client.CoreV1Api,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = cluster.paths
    server = json.loads(paths.state.read_text())["server"]
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "kept"}, "data": {"made": "before"}})
    dead = control_plane.pids["kube-scheduler"]
    os.kill(dead, signal.SIGKILL)
    eventually(lambda: not alive(dead), timeout=10, what="the scheduler to die")
    assert not controlplane.status(paths)

    controlplane.up(paths)

    said = capsys.readouterr().err
    assert f"kube-scheduler (pid {dead}) is not running: starting it again as it was" in said, said
    assert "repaired the cluster (kube-scheduler); every object in it is kept" in said, said
    state = json.loads(paths.state.read_text())
    assert state["server"] == server, "the cluster was replaced, not repaired"
    assert state["pids"]["kube-scheduler"] != dead
    assert alive(state["pids"]["kube-scheduler"])
    assert core.read_namespaced_config_map("kept", namespace).data == {"made": "before"}
    # The scheduler works again: a new pod is bound to a node.
    pod = {
        "metadata": {"name": "scheduled-after-repair"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": FAKE_NODE},
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example.com/none:1",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    eventually(
        lambda: core.read_namespaced_pod("scheduled-after-repair", namespace).spec.node_name,
        timeout=30,
        what="the new pod to be scheduled",
    )
