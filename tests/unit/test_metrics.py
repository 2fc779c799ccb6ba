"""The operator's metric decisions: phases from stored status, API request labels,
handler timing. (Live values during real flows: tests/integration/test_metrics.py.)"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from gymsandbox.kube.client import request_labels
from gymsandbox.metrics import OperatorMetrics, episode_phase, host_phase

READY = {"type": "Ready", "status": "True", "reason": "SandboxReady"}
NOT_READY = {"type": "Ready", "status": "False", "reason": "PodPending"}


@pytest.mark.parametrize(
    ("status", "phase"),
    [
        ({}, "queued"),
        ({"queuePosition": 2, "conditions": [NOT_READY]}, "queued"),
        ({"admittedAt": "2026-12-01T00:00:00Z", "conditions": [NOT_READY]}, "admitted"),
        ({"admittedAt": "2026-12-01T00:00:00Z", "conditions": [READY]}, "ready"),
        ({"failure": {"kind": "Policy"}, "conditions": [NOT_READY]}, "failed"),
        ({"admittedAt": "2026-12-01T00:00:00Z", "failure": {"kind": "Workload"}}, "failed"),
    ],
)
def test_episode_phase_from_stored_status(status: dict[str, object], phase: str) -> None:
    assert episode_phase({"status": status}) == phase


def test_host_phase() -> None:
    assert host_phase({"conditions": [NOT_READY], "failure": None}) == "pending"
    assert host_phase({"conditions": [READY], "failure": None}) == "ready"
    assert host_phase({"conditions": [NOT_READY], "failure": {"kind": "Workload"}}) == "failed"


@pytest.mark.parametrize(
    ("method", "path", "labels"),
    [
        ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "pods")),
        ("GET", "/api/v1/namespaces/ns/pods", ("list", "pods")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", ("get", "pods/log")),
        ("PATCH", "/apis/gymsandbox.dev/v1alpha1/namespaces/ns/episodesandboxes/e/status",
         ("patch", "episodesandboxes/status")),
        ("DELETE", "/apis/gymsandbox.dev/v1alpha1/namespaces/ns/episodesandboxes",
         ("deletecollection", "episodesandboxes")),
        ("DELETE", "/apis/gymsandbox.dev/v1alpha1/namespaces/ns/gymhosts/h", ("delete", "gymhosts")),
        ("POST", "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies", ("create", "networkpolicies")),
        ("PUT", "/api/v1/namespaces/ns/secrets/s", ("update", "secrets")),
        ("GET", "/apis/node.k8s.io/v1/runtimeclasses/crun", ("get", "runtimeclasses")),
        ("GET", "/api/v1/namespaces/ns", ("get", "namespaces")),
    ],
)  # fmt: skip
def test_request_labels_name_verb_and_resource_never_the_object(
    method: str, path: str, labels: tuple[str, str]
) -> None:
    assert request_labels(method, path) == labels


def test_timed_keeps_the_handler_name_the_queue_logs_and_counts_errors() -> None:
    metrics = OperatorMetrics()

    @metrics.timed("tick")
    def episodes_tick(fail: bool) -> str:
        if fail:
            raise RuntimeError("boom")
        return "done"

    assert (episodes_tick.__name__, episodes_tick.__qualname__.rsplit(".", 1)[-1]) == ("episodes_tick",) * 2
    assert episodes_tick(False) == "done"
    with pytest.raises(RuntimeError):
        episodes_tick(True)
    assert metrics.reconcile_errors.labels("tick")._value.get() == 1
    assert metrics.in_flight.labels("tick")._value.get() == 0
    count = metrics.registry.get_sample_value(
        "gymsandbox_reconcile_duration_seconds_count", {"handler": "tick"}
    )
    assert count == 2


def test_latency_starts_at_creation_and_ready_is_observed_once() -> None:
    metrics = OperatorMetrics()
    created = datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    metrics.created("uid-1", created)
    metrics.admitted("uid-1", waited=False)
    metrics.ready("episodesandboxes", "uid-1")
    metrics.ready("episodesandboxes", "uid-1")  # a later flap back to Ready is no new latency
    metrics.admitted("uid-unknown", waited=True)  # never seen created: not timed
    value = metrics.registry.get_sample_value
    assert value("gymsandbox_ready_seconds_count", {"resource": "episodesandboxes"}) == 1
    assert value("gymsandbox_episode_admission_seconds_count") == 1
    assert value("gymsandbox_episode_queue_wait_seconds_count") == 0
    # Whole-second creationTimestamp: never more than the half second it may be off, never negative.
    assert 0 <= (value("gymsandbox_ready_seconds_sum", {"resource": "episodesandboxes"}) or 0) <= 1.5


def test_phase_gauges_sum_hosts_per_namespace_and_forget_released_hosts() -> None:
    metrics = OperatorMetrics()
    metrics.episodes.set("host-a", "ns-1", Counter({"ready": 2, "queued": 1}))
    metrics.episodes.set("host-b", "ns-1", Counter({"ready": 1}))
    value = metrics.registry.get_sample_value
    assert value("gymsandbox_episodes", {"namespace": "ns-1", "phase": "ready"}) == 3
    assert value("gymsandbox_episodes", {"namespace": "ns-1", "phase": "failed"}) == 0
    metrics.forget_host("host-a")
    assert value("gymsandbox_episodes", {"namespace": "ns-1", "phase": "ready"}) == 1
    assert value("gymsandbox_episodes", {"namespace": "ns-1", "phase": "queued"}) == 0


def test_hosts_silent_too_long_and_start_times_never_finished_are_pruned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host whose deletion was never seen stops counting once it reports nothing for an hour."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    metrics = OperatorMetrics()
    metrics.episodes.set("gone-host", "ns-1", Counter({"ready": 2}))
    metrics.created("never-ready", "2026-01-01T00:00:00Z")
    metrics.created("recent", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    clock[0] += 4000
    metrics.episodes.set("live-host", "ns-1", Counter({"ready": 1}))
    metrics.prune(3600, started_seconds=86_400)
    value = metrics.registry.get_sample_value
    assert value("gymsandbox_episodes", {"namespace": "ns-1", "phase": "ready"}) == 1
    assert sorted(metrics._started) == ["recent"]
