"""The API server or etcd killed (SIGKILL) and restarted while episodes are being created, and watches that
resume after their history was compacted away (410 Gone): the operator lists again and every episode reaches
the truth of its pod."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request
from typing import Any

from kubernetes import client

from tests.chaos.faults import assert_no_traceback, burst, converge, wait_api
from tests.cluster_fixtures import Cluster, OperatorProcess
from tests.scrape import scrape

EPISODES = 40
DOWN_SECONDS = 10
CONVERGE_SECONDS = 60  # the scheduler and kwok reconnect too; the operator's own part is LAG_SECONDS


def test_api_server_killed_and_restarted_after_a_compaction_every_watch_relists_and_converges(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    api_client: client.ApiClient,
    control_plane: Any,
) -> None:
    log_offset = len(operator.output())
    expired = watch_restarts(operator, "expired")
    episodes = burst(cluster, namespace, api_client, EPISODES)
    os.kill(control_plane.pids["kube-apiserver"], signal.SIGKILL)
    time.sleep(DOWN_SECONDS)
    # While it is down: etcd forgets every revision so far, so each watch that resumes where it stopped asks
    # for history that is gone and gets 410 Gone.
    compacted = compact_etcd(control_plane.state["ports"]["etcd"])
    control_plane.restart("kube-apiserver")
    figures = converge(operator, episodes, EPISODES, wait_api(api_client), CONVERGE_SECONDS)
    print(
        f"\nafter the API server was down {DOWN_SECONDS} s, etcd compacted at revision {compacted}: {figures}"
    )
    assert watch_restarts(operator, "expired") > expired, "no watch saw 410 Gone: the fault did not happen"
    assert_no_traceback(operator, log_offset)


def test_etcd_killed_and_restarted_every_episode_converges(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    api_client: client.ApiClient,
    control_plane: Any,
) -> None:
    log_offset = len(operator.output())
    episodes = burst(cluster, namespace, api_client, EPISODES)
    os.kill(control_plane.pids["etcd"], signal.SIGKILL)
    time.sleep(DOWN_SECONDS)
    control_plane.restart("etcd")
    figures = converge(operator, episodes, EPISODES, time.monotonic(), CONVERGE_SECONDS)
    print(f"\nafter etcd was down {DOWN_SECONDS} s: {figures}")
    assert_no_traceback(operator, log_offset)


def compact_etcd(port: int) -> int:
    """Compact etcd's history up to its current revision (its JSON gateway); returns that revision."""
    key = base64.b64encode(b"/registry/").decode()
    revision = int(
        etcd_call(port, "/v3/kv/range", {"key": key, "limit": 1, "keys_only": True})["header"]["revision"]
    )
    etcd_call(port, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def etcd_call(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - etcd on loopback
        answer: dict[str, Any] = json.load(response)
    return answer


def watch_restarts(operator: OperatorProcess, cause: str) -> float:
    return scrape(operator.metrics_url).value("gymsandbox_watch_restarts_total", cause=cause)
