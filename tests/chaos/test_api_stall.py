"""The API server stalled (its process stopped, then resumed) while episodes are being created: every episode
reaches the truth of its pod soon after, although the pod events of the stall are lost or fail.

Stalls of 5 s (shorter than any timeout), 45 s (the issue's) and 150 s (longer than kopf's watch timeouts and
the node controller's grace period). After the long one the nodes' leases look stale at the resume, so the
node controller marks every node unreachable and every pod not Ready: pods wait to be scheduled until the
nodes are back, and the kubelets (or kwok's `pod-ready-again` stage) then write Ready back. That part of the
time belongs to the scheduler and the node controller, so after 150 s every episode must be Ready within
90 s, and (after every stall) no later than LAG_SECONDS after its pod.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.chaos.faults import assert_no_traceback, burst, converge, stall
from tests.support.cluster import Cluster
from tests.support.processes import OperatorProcess

EPISODES = 40


@pytest.mark.parametrize(("stall_seconds", "converge_seconds"), [(5, 30), (45, 30), (150, 90)])
def test_every_episode_converges_after_an_api_server_stall(
    stall_seconds: int,
    converge_seconds: int,
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    api_client: client.ApiClient,
    control_plane: Any,
) -> None:
    log_offset = len(operator.output())
    episodes = burst(cluster, namespace, api_client, EPISODES)
    stall(control_plane.pids["kube-apiserver"], stall_seconds)
    figures = converge(operator, episodes, EPISODES, time.monotonic(), converge_seconds)
    print(f"\nafter a {stall_seconds} s stall of the API server: {figures}")
    assert_no_traceback(operator, log_offset)
