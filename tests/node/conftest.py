"""The node tier: the shared cluster fixtures (tests/support/fixtures.py) plus a real node with real
containers.

Every test here runs on the real node that `python -m hack.localcluster up` starts
(hack/localcluster/node.py), or on any cluster named by KUBECONFIG whose nodes carry the label
`gymsandbox.dev/real-node=true` and the profiles `crun` and `gvisor`.
Where this machine cannot run a real node, the tier is skipped with that reason; where it can, a missing node
is an error, never a skip.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hack.localcluster import node as local_node
from hack.localcluster.nodeconfig import REAL_NODE_LABEL, SHELL_IMAGE
from hack.sample import local_volume
from kubernetes import client
from tests.support.cluster import Cluster
from tests.support.fixtures import SHARED_PREFIX
from tests.support.gymhosts import Hosts, apply, eventually, sample
from tests.support.namespaces import restricted_namespace

REAL_NODE_SELECTOR = f"{REAL_NODE_LABEL}=true"
ENVIRONMENT = "environments/env-1"
HEALTH_BODY = "ok from the environment\n"
# How long a real node that is there but not Ready (its kubelet not heard from for a while) is waited for.
NODE_READY_SECONDS = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/node/" in item.nodeid:
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def real_node(cluster: Cluster, core: client.CoreV1Api) -> str:
    """The name of a Ready real node; skips the tier only where the machine cannot have one. A node that is
    there but not Ready is waited for a while: a fault just before (the chaos tier's API-server stall) leaves
    it NotReady until its kubelet reports again."""
    ready = _ready_real_nodes(core)
    if ready:
        return ready[0]
    why = local_node.missing_capability() if cluster.local else "KUBECONFIG's cluster has no real node"
    if cluster.local and not local_node.enabled():
        why = "GYMSANDBOX_REAL_NODE=0"
    if why:
        pytest.skip(f"no real node: {why}")
    deadline = time.monotonic() + NODE_READY_SECONDS
    while time.monotonic() < deadline:
        time.sleep(2)
        if ready := _ready_real_nodes(core):
            return ready[0]
    conditions = {
        n.metadata.name: [(c.type, c.status, c.reason) for c in n.status.conditions or []]
        for n in core.list_node(label_selector=REAL_NODE_SELECTOR).items
    }
    pytest.fail(
        f"this machine can run the real node, but no node labelled {REAL_NODE_SELECTOR} became Ready "
        f"within {NODE_READY_SECONDS} s; the nodes' conditions: {conditions}"
    )


def _ready_real_nodes(core: client.CoreV1Api) -> list[str]:
    return [n.metadata.name for n in core.list_node(label_selector=REAL_NODE_SELECTOR).items if _is_ready(n)]


def module_namespace(
    core: client.CoreV1Api, tmp_path_factory: pytest.TempPathFactory, what: str
) -> Iterator[str]:
    """A restricted namespace for a module's shared objects, watched by the session's operator."""
    suffix = tmp_path_factory.getbasetemp().name[-6:].lower().replace("_", "-")
    yield from restricted_namespace(core, f"{SHARED_PREFIX}-node-{what}-{suffix}")


def _is_ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def module_host(
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    node: str,
    tmp_path_factory: pytest.TempPathFactory,
    host: dict[str, Any],
) -> Iterator[str]:
    """A module's namespace with a volume on `node` and `host` applied there and HostReady; yields the
    namespace, and removes it all afterwards."""
    name = host["metadata"]["name"]
    for namespace in module_namespace(core, tmp_path_factory, name):
        for _ in make_volume(cluster, namespace, node, tmp_path_factory.mktemp(name)):
            apply(cluster, namespace, host)
            Hosts(api_client, namespace).wait_reason(name, "HostReady", timeout=180)
            yield namespace


@dataclass(frozen=True)
class Volume:
    """A directory on the real node, bound to a claim through a local PersistentVolume."""

    claim: str
    path: Path


@pytest.fixture
def volume(cluster: Cluster, namespace: str, real_node: str, tmp_path: Path) -> Iterator[Volume]:
    yield from make_volume(cluster, namespace, real_node, tmp_path)


def make_volume(cluster: Cluster, namespace: str, node: str, directory: Path) -> Iterator[Volume]:
    """Claim `gym-storage` in `namespace`, bound to a fresh directory on `node` through a local
    PersistentVolume: the environment tree (mounted read-only by hosts) and a workspaces tree."""
    root = directory / "volume"
    (root / ENVIRONMENT).mkdir(parents=True)
    (root / ENVIRONMENT / "health").write_text(HEALTH_BODY)
    (root / "workspaces").mkdir()
    for parent in (directory, *directory.parents):  # the kubelet (root) mounts it; pods reach it as 65532
        parent.chmod(parent.stat().st_mode | 0o711)
    pv, claim = local_volume(namespace, root, node)
    cluster.kubectl_run("apply", "-f", "-", stdin=json.dumps(pv))
    apply(cluster, namespace, claim)
    yield Volume("gym-storage", root)
    cluster.kubectl_run(
        "delete", "pv", pv["metadata"]["name"], "--ignore-not-found", "--wait=false", check=False
    )


def node_host(name: str, runtime: str, **spec: Any) -> dict[str, Any]:
    """A GymHost on the real node: the shell image serving its environment directory over HTTP."""
    _, host = sample()
    host["metadata"]["name"] = name
    host["spec"].update(
        {
            "image": SHELL_IMAGE,
            "runtime": runtime,
            "command": ["httpd", "-f", "-v", "-p", "8080", "-h", "/env"],
            "storage": {
                "claimName": "gym-storage",
                "environment": {"subPath": ENVIRONMENT, "mountPath": "/env"},
                "workspace": {"mountPath": "/workspace"},
            },
            "egress": {"allow": []},
            "resources": {"cpu": "100m", "memory": "256Mi", "ephemeralStorage": "1Gi"},
            "episodes": {"maxConcurrent": 4, "images": [SHELL_IMAGE], "defaultTTLSeconds": 600,
                         "maxTTLSeconds": 1800},
            **spec,
        }
    )  # fmt: skip
    return host


def shell_pod(name: str, runtime: str, command: list[str], **container: Any) -> dict[str, Any]:
    """A bare pod of the shell image on the real node (no operator involved), as `restricted` admits it."""
    security = {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
        "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "runtimeClassName": runtime,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": SHELL_IMAGE, "imagePullPolicy": "Never", "command": command,
                            "securityContext": security, **container}],
        },
    }  # fmt: skip


def exec_in(
    cluster: Cluster, namespace: str, pod: str, script: str, container: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`sh -c script` in the pod, through the API server and the kubelet's streaming path (never raises)."""
    args = ["exec", "-n", namespace, pod]
    if container:
        args += ["-c", container]
    return cluster.kubectl_run(*args, "--", "sh", "-c", script, check=False)


def wait_pod_ready(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 120) -> client.V1Pod:
    def ready() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        conditions = pod.status.conditions or []
        return pod if any(c.type == "Ready" and c.status == "True" for c in conditions) else None

    return eventually(ready, timeout, f"pod {namespace}/{name} Ready")
