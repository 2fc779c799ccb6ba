"""An episode's policy verdict is kept while neither its spec nor its host's spec changes: a burst plans every
episode of a host on each create, and the host's status (its counts) changes every second."""

from __future__ import annotations

from typing import Any, cast

from gymsandbox.api.conditions import Reason
from gymsandbox.handlers.context import OperatorContext
from gymsandbox.handlers.episode_queue import judged
from gymsandbox.handlers.kube import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy


def context() -> OperatorContext:
    return OperatorContext(
        policy=ClusterPolicy(), kube=cast(Kube, None), signing_key=SigningKey.generate(), namespaces=()
    )


def episode() -> dict[str, Any]:
    return {
        "metadata": {"name": "ep", "namespace": "ns", "uid": "e-1", "generation": 1},
        "spec": {"hostRef": {"name": "h"}, "rolloutId": "r", "image": "example.org/episode:1"},
    }


def host(resource_version: str, generation: int, **meta: Any) -> dict[str, Any]:
    metadata = {"name": "h", "namespace": "ns", "uid": "h-1", "resourceVersion": resource_version}
    return {"metadata": {**metadata, "generation": generation, **meta}, "spec": {}}


def test_a_host_status_write_keeps_the_verdict_and_a_host_spec_change_renews_it() -> None:
    ctx = context()
    first = judged(ctx, episode(), host("10", 1))
    assert judged(ctx, episode(), host("11", 1)) is first  # only its status (resourceVersion) moved
    assert judged(ctx, episode(), host("12", 2)) is not first


def test_a_host_being_deleted_renews_the_verdict() -> None:
    ctx = context()
    judged(ctx, episode(), host("10", 1))
    closing = judged(ctx, episode(), host("11", 1, deletionTimestamp="2026-12-03T00:00:00Z"))
    assert closing.refusal is not None
    assert closing.refusal.reason == Reason.HOST_NOT_FOUND
