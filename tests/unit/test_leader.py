"""Active/standby (handlers/leader.py): what a candidate does with the Lease as it reads it, judged by its own
clock; one Lease per scope; a holder that has not renewed for the renew deadline writes nothing."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from gymsandbox.handlers.leader import (
    LEASE_SECONDS,
    RENEW_DEADLINE_SECONDS,
    LeaderElection,
    decide,
    lease_name,
)
from gymsandbox.kube.client import Kube


def lease(holder: str | None, duration: int | None = LEASE_SECONDS) -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration}}


@pytest.mark.parametrize(
    ("read", "unchanged_for", "decision"),
    [
        (None, 0.0, "create"),
        (lease("me"), 0.0, "renew"),
        (lease("me"), 60.0, "renew"),
        (lease(None), 0.0, "take"),  # released by a holder that stopped in order
        (lease("other"), LEASE_SECONDS - 0.1, "wait"),
        (lease("other"), LEASE_SECONDS, "take"),
        (lease("other", duration=30), 29.0, "wait"),  # the holder's own duration counts
        (lease("other", duration=None), LEASE_SECONDS, "take"),
    ],
    ids=["none", "mine", "mine-late", "released", "fresh", "stale", "long-lease", "no-duration"],
)
def test_a_candidate_takes_a_lease_only_once_it_stayed_unchanged_for_the_holders_duration(
    read: dict[str, Any] | None, unchanged_for: float, decision: str
) -> None:
    assert decide(read, "me", unchanged_for) == decision


def test_instances_of_one_scope_contend_for_one_lease_and_other_scopes_for_their_own() -> None:
    assert lease_name(["team-a", "team-b"]) == lease_name(["team-b", "team-a"])
    assert lease_name(["team-a"]) != lease_name(["team-b"])
    assert lease_name([]) != lease_name(["team-a"])
    assert len(lease_name(["x" * 300])) <= 63


def test_the_renew_deadline_ends_before_a_standby_may_take_over() -> None:
    """The old holder stops writing before anyone can hold the Lease after it."""
    assert RENEW_DEADLINE_SECONDS < LEASE_SECONDS


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_holder_is_fenced_once_it_has_not_renewed_for_the_deadline() -> None:
    clock = Clock()
    election = LeaderElection(cast(Kube, None), "ns", "l", "me", clock=clock)
    assert election.fence() is not None  # never led
    election._renewed_at = clock.now  # a renewal sent now
    assert election.fence() is None
    clock.now += RENEW_DEADLINE_SECONDS - 0.1
    assert election.fence() is None
    clock.now += 0.1
    assert election.fence() == "not leading: Lease ns/l is not renewed"


def test_a_fenced_client_refuses_writes_as_the_api_servers_503_and_still_reads() -> None:
    kube = Kube(cast(Any, None), fence=lambda: "not leading")
    with pytest.raises(ApiException) as refused:
        kube._request("POST", "/api/v1/namespaces/ns/secrets", {})
    assert (refused.value.status, refused.value.reason) == (503, "not leading")
