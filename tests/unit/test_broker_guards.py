"""The broker's guards (broker/guards.py): the only pod it execs into for an episode, and each host's share of
calls in flight."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gymsandbox.broker.auth import Caller
from gymsandbox.broker.errors import BrokerError
from gymsandbox.broker.guards import HostShares, not_its_sandbox
from gymsandbox.leases import Claims, Scope

EPISODE = {"metadata": {"name": "ep", "uid": "uid-ep"}, "status": {"podName": "ep-sandbox"}}
POD = {
    "metadata": {
        "name": "ep-sandbox",
        "labels": {"app.kubernetes.io/component": "episode"},
        "ownerReferences": [{"kind": "EpisodeSandbox", "name": "ep", "uid": "uid-ep", "controller": True}],
    }
}


def changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    copied = copy.deepcopy(obj)
    *parents, last = path.split(".")
    target = copied
    for key in parents:
        target = target[key]
    target[last] = value
    return copied


def test_the_episodes_own_pod_is_its_sandbox() -> None:
    assert not_its_sandbox(POD, EPISODE) is None


@pytest.mark.parametrize(
    ("pod", "episode", "words"),
    [
        (None, EPISODE, "does not exist"),
        (POD, changed(EPISODE, "status.podName", "gymhost-host"), "its status names pod gymhost-host"),
        (
            changed(
                POD,
                "metadata.ownerReferences",
                [{"kind": "EpisodeSandbox", "uid": "uid-old", "controller": True}],
            ),
            EPISODE,
            "not controlled by this episode",
        ),
        (
            changed(POD, "metadata.ownerReferences", [{"kind": "EpisodeSandbox", "uid": "uid-ep"}]),
            EPISODE,
            "not controlled by this episode",
        ),
        (changed(POD, "metadata.ownerReferences", []), EPISODE, "not controlled by this episode"),
        (
            changed(POD, "metadata.labels", {"app.kubernetes.io/component": "gymhost"}),
            EPISODE,
            "not a sandbox",
        ),
    ],
    ids=["missing", "status-points-elsewhere", "namesakes-pod", "not-controller", "orphan", "not-a-sandbox"],
)
def test_any_other_pod_is_refused_with_its_reason(
    pod: dict[str, Any] | None, episode: dict[str, Any], words: str
) -> None:
    assert words in (not_its_sandbox(pod, episode) or "")


def host(name: str) -> Caller:
    claims = Claims(kind="GymHost", namespace="evals", name=name, uid="u", scope=Scope.HOST, expires_at=9)
    return Caller(claims, {})


def test_a_host_holds_at_most_its_share_of_calls_and_others_keep_theirs() -> None:
    async def scenario() -> None:
        shares = HostShares(2, host_bytes=1000, total_bytes=10_000)
        async with shares.call(host("a")), shares.call(host("a")):
            with pytest.raises(
                BrokerError, match="the host has 2 commands and transfers in flight"
            ) as refused:
                async with shares.call(host("a")):
                    pass
            assert (refused.value.code, refused.value.retry_after) == ("quota_exceeded", 1)
            async with shares.call(host("b")):
                pass
        assert shares._held == {}  # nothing kept for hosts with nothing in flight

    asyncio.run(scenario())


def test_a_host_holds_at_most_its_share_of_memory_and_others_keep_theirs() -> None:
    async def scenario() -> None:
        shares = HostShares(32, host_bytes=1000, total_bytes=10_000)
        async with shares.memory(host("a"), 600), shares.call(host("a"), 400):
            with pytest.raises(BrokerError, match=r"hold 1000 bytes .* needs 1 more") as refused:
                async with shares.call(host("a"), 1):
                    pass
            assert (refused.value.code, refused.value.retry_after) == ("quota_exceeded", 1)
            async with shares.call(host("b"), 1000):
                pass
        async with shares.call(host("a"), 1000):  # released when the calls ended
            pass
        assert shares._held == {}

    asyncio.run(scenario())


def test_all_hosts_together_hold_at_most_the_total() -> None:
    async def scenario() -> None:
        shares = HostShares(32, host_bytes=1000, total_bytes=1500)
        async with shares.call(host("a"), 1000):
            with pytest.raises(BrokerError, match="the broker's memory for calls in flight"):
                async with shares.memory(host("b"), 501):
                    pass
            async with shares.memory(host("b"), 500):
                pass
        assert shares._held == {}

    asyncio.run(scenario())
