"""Faults for the chaos tier and the checks that every object converges after one."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import LABEL_COMPONENT
from gymsandbox.desired.labels import COMPONENT_EPISODE
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, sample, set_path
from tests.support.processes import OperatorProcess
from tests.support.scrape import scrape

HOST = "swe-gym-run-1"


def stall(pid: int, seconds: float) -> None:
    """SIGSTOP the process for `seconds`, then SIGCONT it, whatever happens meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def wait_api(api_client: client.ApiClient, timeout: float = 120) -> float:
    """Wait until the API server answers again; returns when, as time.monotonic()."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.VersionApi(api_client).get_code(_request_timeout=2)
            return time.monotonic()
        except (ApiException, urllib3.exceptions.HTTPError):
            assert time.monotonic() < deadline, f"the API server did not answer within {timeout} s"
            time.sleep(0.25)


CLAIM_RESYNC_WAIT = 90


def burst(cluster: Cluster, namespace: str, api_client: client.ApiClient, count: int) -> Episodes:
    """A Ready host with room for `count` episodes, and `count` episodes created at once (ep-00, ...)."""
    claim, host = sample()
    set_path(host, "spec.episodes.maxConcurrent", count)
    apply(cluster, namespace, claim, host)
    # Longer than elsewhere: the previous test may have just restarted the control plane, and a claim the
    # controller manager saw bound before its volume reached its cache stays Lost until its next resync.
    Hosts(api_client, namespace).wait_reason(HOST, "HostReady", timeout=CLAIM_RESYNC_WAIT)
    episodes = Episodes(api_client, namespace)
    for i in range(count):
        episodes.create(episode(f"ep-{i:02d}"))
    return episodes


# How far an episode's status may trail its pod's: the operator's own part of any convergence time.
LAG_SECONDS = 10


@dataclass(frozen=True)
class Convergence:
    pods: float  # seconds from the fault's end until every episode pod was Ready
    episodes: float  # ... until every episode said SandboxReady

    @property
    def lag(self) -> float:
        return self.episodes - self.pods

    def __str__(self) -> str:
        return f"pods Ready {self.pods:.1f} s, episodes {self.episodes:.1f} s (lag {self.lag:.1f} s)"


def wait_all_ready(episodes: Episodes, count: int, since: float, within: float) -> Convergence:
    """Wait until all `count` episodes say SandboxReady, at most `within` seconds after `since`, and that they
    trailed their pods' Ready by at most LAG_SECONDS."""
    pods_at = None
    while True:
        now = time.monotonic() - since
        pods = pods_ready(episodes)
        if pods_at is None and len(pods) == count and all(ready == "True" for ready in pods.values()):
            pods_at = now
        reasons = {
            e["metadata"]["name"]: Episodes.condition(e, "Ready").get("reason") for e in episodes.all()
        }
        stale = {name: reason for name, reason in reasons.items() if reason != "SandboxReady"}
        if len(reasons) == count and not stale:
            converged = Convergence(pods_at if pods_at is not None else now, now)
            assert converged.lag <= LAG_SECONDS, f"episodes trailed their pods: {converged}"
            return converged
        assert now < within, f"after {within} s: episodes {stale}, their pods' Ready {pods}"
        time.sleep(0.5)


def pods_ready(episodes: Episodes) -> dict[str, str]:
    """Each episode pod's own Ready condition: whether the episode or its pod is behind."""
    pods = client.CoreV1Api(episodes.custom.api_client).list_namespaced_pod(
        episodes.namespace, label_selector=f"{LABEL_COMPONENT}={COMPONENT_EPISODE}"
    )
    return {
        p.metadata.name: next((c.status for c in p.status.conditions or [] if c.type == "Ready"), "none")
        for p in pods.items
    }


def converge(operator: OperatorProcess, episodes: Episodes, count: int, since: float, within: float) -> str:
    """wait_all_ready, counting the operator's API requests meanwhile; returns the figures, in words."""
    requests = api_requests(operator)
    converged = wait_all_ready(episodes, count, since, within)
    return f"{converged}, {api_requests(operator) - requests:.0f} API requests"


def api_requests(operator: OperatorProcess) -> float:
    """The API requests the operator's handlers have made so far."""
    return scrape(operator.metrics_url).value("gymsandbox_api_requests_total")


def assert_no_traceback(operator: OperatorProcess, log_offset: int) -> None:
    """No traceback in the operator's log since `log_offset`; else the first one, with the line before it."""
    log = operator.output()[log_offset:]
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("Traceback")), None)
    assert first is None, "\n".join(lines[max(first - 1, 0) : first + 60])


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


EPISODE_LABEL = "gymsandbox.dev/episode"


def is_admitted(episode: dict[str, Any]) -> bool:
    return Episodes.condition(episode, "Admitted").get("status") == "True"


def children_problems(
    api_client: client.ApiClient, namespace: str, live: list[dict[str, Any]], uids: dict[str, str]
) -> list[str]:
    """Duplicated, missing and orphaned episode children, as sentences: each admitted episode of `live` has
    one Pod, one Secret and one NetworkPolicy, and each child's episode (`uids`: name to uid) owns it."""
    core, networking = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    admitted_names = {e["metadata"]["name"] for e in live if is_admitted(e)}
    problems = []
    for kind, listing in {
        "Pod": core.list_namespaced_pod,
        "Secret": core.list_namespaced_secret,
        "NetworkPolicy": networking.list_namespaced_network_policy,
    }.items():
        children = listing(namespace, label_selector=f"{LABEL_COMPONENT}={COMPONENT_EPISODE}").items
        per_episode = Counter(c.metadata.labels[EPISODE_LABEL] for c in children)
        problems += [f"{n} {kind}s for {name}" for name, n in per_episode.items() if n > 1]
        problems += [f"no {kind} for admitted {name}" for name in admitted_names - set(per_episode)]
        for child in children:
            owner = child.metadata.labels[EPISODE_LABEL]
            owners = {ref.uid for ref in child.metadata.owner_references or []}
            if owner not in uids or uids[owner] not in owners:
                problems.append(f"orphaned {kind} {child.metadata.name} (episode {owner} is gone)")
    return problems
