"""The drift pass (episodes_needing_repair) reads the children's stores: an episode whose children were made
a moment ago may have no pod stored yet (its watch has not told of it), and is then neither repaired nor a
failure of the pass. Seen under 1,000 episodes expiring at once (tests/chaos/test_mass_expiry.py): a KeyError
failed the pass for every episode of the namespace."""

from __future__ import annotations

import time
from typing import Any, cast

from gymsandbox.handlers.context import Made, OperatorContext
from gymsandbox.handlers.episode_children import WATCH_LAG_SECONDS, episodes_needing_repair
from gymsandbox.handlers.kube import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy


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
