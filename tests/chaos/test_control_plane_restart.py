"""The API server or etcd killed (SIGKILL) and restarted while episodes are being created, and watches that
resume after their history was compacted away (410 Gone): the operator lists again and every episode reaches
the truth of its pod."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import LABEL_COMPONENT
from gymsandbox.desired.labels import COMPONENT_EPISODE
from tests.chaos.faults import assert_no_traceback, burst, compact_etcd, converge, wait_api
from tests.support.cluster import Cluster
from tests.support.processes import OperatorProcess
from tests.support.scrape import scrape

EPISODES = 40
DOWN_SECONDS = 10
CONVERGE_SECONDS = 60  # the scheduler and kwok reconnect too; the operator's own part is LAG_SECONDS
RESYNC_EVERY = 5.0  # seconds between kubelet_resync's passes
SANDBOX_PODS = f"{LABEL_COMPONENT}={COMPONENT_EPISODE}"


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
    relisted = operator.output()[log_offset:]
    for plural in ("episodesandboxes", "pods"):  # the episodes' own watches (kube/informer.py)
        assert f"the watch of {plural} expired (410 Gone): listing them again" in relisted
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
    with kubelet_resync(api_client, namespace):
        figures = converge(operator, episodes, EPISODES, time.monotonic(), CONVERGE_SECONDS)
    print(f"\nafter etcd was down {DOWN_SECONDS} s: {figures}")
    assert_no_traceback(operator, log_offset)


@contextlib.contextmanager
def kubelet_resync(api_client: client.ApiClient, namespace: str) -> Iterator[None]:
    """What a real kubelet does and kwok does not: sync each pod's status again later. kwok plays a pod's
    stage once per change of the pod; one whose status patch died with etcd (the operator now makes the
    pods within the kill window) would stay Pending for good. Every few seconds, each sandbox pod not Ready
    yet gets an annotation, a change that makes kwok play its stage again. The operator is not touched."""
    core, stop = client.CoreV1Api(api_client), threading.Event()

    def touch() -> None:
        while not stop.wait(RESYNC_EVERY):
            try:
                pods = core.list_namespaced_pod(namespace, label_selector=SANDBOX_PODS).items
                for pod in pods:
                    conditions = (pod.status.conditions if pod.status else None) or []
                    if pod.metadata and not any(c.type == "Ready" and c.status == "True" for c in conditions):
                        patch = {
                            "metadata": {"annotations": {"test.gymsandbox.dev/resync": str(time.time())}}
                        }
                        core.patch_namespaced_pod(str(pod.metadata.name), namespace, patch)
            except (ApiException, urllib3.exceptions.HTTPError):
                continue  # the API server is still coming back

    thread = threading.Thread(target=touch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def watch_restarts(operator: OperatorProcess, cause: str) -> float:
    return scrape(operator.metrics_url).value("gymsandbox_watch_restarts_total", cause=cause)
