"""The drift pass (episodes_needing_repair) reads the children's stores: an episode whose children were made
a moment ago may have no pod stored yet (its watch has not told of it), and is then neither repaired nor a
failure of the pass. Seen under 1,000 episodes expiring at once (tests/chaos/test_mass_expiry.py): a KeyError
failed the pass for every episode of the namespace.

It compares an episode's stored Ready with its stored pod once, and again only once either changes: a pass
that skipped a changed pair would leave a stale Ready unrepaired."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from gymsandbox.api.names import LABEL_EPISODE
from gymsandbox.desired.names import label_value
from gymsandbox.handlers import episode_children
from gymsandbox.handlers.context import Made, OperatorContext
from gymsandbox.handlers.episode_children import WATCH_LAG_SECONDS, episodes_needing_repair
from gymsandbox.kube.client import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.status.episode import ready_is_stale


def context() -> OperatorContext:
    kube = cast(Kube, None)  # nothing here may call the API server: a call fails the test
    return OperatorContext(
        policy=ClusterPolicy(), kube=kube, signing_key=SigningKey.generate(), namespaces=()
    )


def admitted_episode(name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
        "spec": {"hostRef": {"name": "h"}},
        "status": {"admittedAt": "2026-12-06T00:00:00Z"},
    }


def test_children_made_a_moment_ago_with_no_pod_stored_yet_are_left_alone() -> None:
    ctx = context()
    ctx.hosts.put({"metadata": {"name": "h", "namespace": "ns", "uid": "h-1", "resourceVersion": "1"}})
    ctx.episodes.put(admitted_episode("h-ep-1", "e-1"))
    ctx.children["e-1"] = Made(since=time.monotonic())
    assert episodes_needing_repair(ctx, "ns") == []


def test_children_made_long_ago_with_no_pod_stored_are_repaired() -> None:
    ctx = context()
    ctx.hosts.put({"metadata": {"name": "h", "namespace": "ns", "uid": "h-1", "resourceVersion": "1"}})
    ctx.episodes.put(admitted_episode("h-ep-1", "e-1"))
    ctx.children["e-1"] = Made(since=time.monotonic() - WATCH_LAG_SECONDS - 1)
    assert episodes_needing_repair(ctx, "ns") == ["h-ep-1"]
    assert "e-1" not in ctx.children  # what was remembered of them is forgotten: the repair makes them anew


def ready_episode(resource_version: str, ready: tuple[str, str]) -> dict[str, Any]:
    episode = admitted_episode("h-ep-1", "e-1")
    episode["metadata"]["resourceVersion"] = resource_version
    status, reason = ready
    episode["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": reason}]
    return episode


def sandbox_pod(resource_version: str, *, ready: bool) -> dict[str, Any]:
    """The episode's pod as its watch stores it, running, its container ready or not."""
    return {
        "metadata": {
            "name": "h-ep-1-sandbox",
            "namespace": "ns",
            "uid": "p-1",
            "resourceVersion": resource_version,
            "labels": {LABEL_EPISODE: label_value("h-ep-1")},
            "ownerReferences": [
                {"kind": "EpisodeSandbox", "name": "h-ep-1", "uid": "e-1", "controller": True}
            ],
        },
        "spec": {"nodeName": "node-1"},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
            "containerStatuses": [
                {"name": "sandbox", "ready": ready, "restartCount": 0, "state": {"running": {}}}
            ],
        },
    }


def counting_comparisons(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def counted(stored: Any, pod: Any) -> bool:
        calls.append(1)
        return ready_is_stale(stored, pod)

    monkeypatch.setattr(episode_children, "ready_is_stale", counted)
    return calls


def ready_context() -> OperatorContext:
    """An episode stored Ready, its pod stored ready, its children made a moment ago (so only the Ready
    comparison can find it in need of repair)."""
    ctx = context()
    ctx.hosts.put({"metadata": {"name": "h", "namespace": "ns", "uid": "h-1", "resourceVersion": "1"}})
    ctx.episodes.put(ready_episode("2", READY))
    ctx.pods.put(sandbox_pod("5", ready=True))
    ctx.children["e-1"] = Made(since=time.monotonic())
    return ctx


READY = ("True", "SandboxReady")


def test_an_episode_and_pod_in_agreement_are_compared_again_only_once_the_pod_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting_comparisons(monkeypatch)
    ctx = ready_context()
    assert episodes_needing_repair(ctx, "ns") == []
    assert episodes_needing_repair(ctx, "ns") == []
    assert len(calls) == 1  # the second pass found both as the first left them
    ctx.pods.put(sandbox_pod("6", ready=False))  # its readiness lost, and the event that says so missed
    assert episodes_needing_repair(ctx, "ns") == ["h-ep-1"]
    assert len(calls) == 2


def test_an_episode_whose_stored_ready_changed_since_it_agreed_is_compared_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting_comparisons(monkeypatch)
    ctx = ready_context()
    assert episodes_needing_repair(ctx, "ns") == []
    ctx.episodes.put(ready_episode("3", ("False", "PodNotReady")))  # a status written from a stale reading
    assert episodes_needing_repair(ctx, "ns") == ["h-ep-1"]
    assert len(calls) == 2
