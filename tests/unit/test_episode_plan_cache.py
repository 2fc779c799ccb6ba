"""What the planner works out per episode is kept while its inputs stay: the policy verdict while neither the
episode's spec nor its host's spec changes (the host's status, its counts, changes every second), its slot
while the episode is the same version and no decision on it is pending. A burst plans every episode of a host
on each create."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from gymsandbox.api.conditions import Reason
from gymsandbox.handlers.context import Admission, OperatorContext
from gymsandbox.handlers.episode_queue import judged, planned_slot
from gymsandbox.kube.client import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy


def context() -> OperatorContext:
    return OperatorContext(
        policy=ClusterPolicy(), kube=cast(Kube, None), signing_key=SigningKey.generate(), namespaces=()
    )


def episode(resource_version: str = "1") -> dict[str, Any]:
    meta = {"name": "ep", "namespace": "ns", "uid": "e-1", "generation": 1}
    return {
        "metadata": {
            **meta,
            "resourceVersion": resource_version,
            "creationTimestamp": "2026-12-03T00:00:00Z",
        },
        "spec": {"hostRef": {"name": "h"}, "rolloutId": "r", "image": "example.org/episode:1"},
    }


def host(resource_version: str, generation: int, spec: Any = None, **meta: Any) -> dict[str, Any]:
    metadata = {
        "name": "h",
        "namespace": "ns",
        "uid": "h-1",
        "resourceVersion": resource_version,
        "creationTimestamp": "2026-12-03T00:00:00Z",
    }
    return {"metadata": {**metadata, "generation": generation, **meta}, "spec": spec or {}}


def test_a_host_status_write_keeps_the_verdict_and_a_host_spec_change_renews_it() -> None:
    ctx = context()
    first = judged(ctx, episode(), host("10", 1))
    assert judged(ctx, episode(), host("11", 1)) is first  # only its status (resourceVersion) moved
    assert judged(ctx, episode(), host("12", 2, spec={"port": "eighty"})) is not first


def test_a_host_being_deleted_renews_the_verdict() -> None:
    ctx = context()
    judged(ctx, episode(), host("10", 1))
    closing = judged(ctx, episode(), host("11", 1, deletionTimestamp="2026-12-03T00:00:00Z"))
    assert closing.refusal is not None
    assert closing.refusal.reason == Reason.HOST_NOT_FOUND


def test_a_slot_is_kept_for_one_version_of_the_episode_and_renewed_by_a_pending_decision() -> None:
    ctx = context()
    first = planned_slot(ctx, episode("1"), host("10", 1))
    assert planned_slot(ctx, episode("1"), host("11", 1)) is first
    assert first.slot.admitted is False
    moment = datetime(2026, 12, 3, tzinfo=UTC)
    ctx.admissions["e-1"] = Admission(moment, moment + timedelta(seconds=60))
    decided = planned_slot(ctx, episode("1"), host("11", 1))
    assert decided is not first
    assert decided.slot.admitted is True
    assert planned_slot(ctx, episode("2"), host("11", 1)) is not decided
