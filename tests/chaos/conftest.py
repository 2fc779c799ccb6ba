"""The chaos tier: faults against the live control plane while the operator and the broker work, each test
asserting that every object converges and nothing is lost or duplicated. A fault here touches the whole
cluster: run it on its own (`make chaos`), or last. It is not in `make test` yet (see the README's tiers).

Faults are made by signalling processes of the local control plane that `hack/cluster.py up` started (their
PIDs are in its state file); on KUBECONFIG's cluster there are none of ours to signal, and the tier is
skipped with that reason.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.cluster_fixtures import Cluster, cluster_script


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in item.nodeid:
            item.add_marker(pytest.mark.chaos)


@pytest.fixture
def control_plane_pids(cluster: Cluster) -> dict[str, int]:
    """PIDs of the local control plane's processes, by name (kube-apiserver, etcd, ...)."""
    if not cluster.local:
        pytest.skip("KUBECONFIG's cluster: its control plane is not a process started here")
    paths = cluster_script.Paths(cluster_script.STATE_DIR)  # type: ignore[attr-defined]
    pids: dict[str, int] = json.loads(paths.state.read_text())["pids"]
    return pids


def stall(pid: int, seconds: float) -> None:
    """SIGSTOP the process for `seconds`, then SIGCONT it, whatever happens meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
