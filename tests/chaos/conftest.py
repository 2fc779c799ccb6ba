"""The chaos tier: faults against the live control plane while the operator and the broker work, each test
asserting that every object converges and nothing is lost or duplicated. A fault here touches the whole
cluster: run it on its own (`make chaos`), or last (as `make test` does).

Faults are made by signalling processes of the local control plane that `python -m hack.localcluster up`
started (their PIDs, and how each was started, are in its state file); on KUBECONFIG's cluster there are
none of ours to signal, and the tier is skipped with that reason. The faults and the convergence checks are
in faults.py.
"""

from __future__ import annotations

import pytest
from hack.localcluster.paths import cluster_paths
from hack.localcluster.processes import Processes

from tests.node.conftest import real_node  # noqa: F401 - the broker faults run on the real node
from tests.support.cluster import Cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in item.nodeid:
            item.add_marker(pytest.mark.chaos)


@pytest.fixture
def control_plane(cluster: Cluster) -> Processes:
    """The Processes of the local control plane (kube-apiserver, etcd, ...): their PIDs, and a restart of
    each as it was started."""
    if not cluster.local:
        pytest.skip("KUBECONFIG's cluster: its control plane is not a process started here")
    paths = cluster_paths()
    return Processes(paths.state, paths.logs)
