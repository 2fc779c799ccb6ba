"""Broker authentication and authorization: which tokens speak for which objects, and what is looked up."""

from __future__ import annotations

from typing import Any

import pytest

from gymsandbox.broker.auth import Caller, authenticate, authorize_episode
from gymsandbox.broker.errors import BrokerError
from gymsandbox.leases import Claims, Scope, SigningKey, issue, operate_claims

KEY = SigningKey.generate()
FOREIGN = SigningKey.generate()
FAR = 4_000_000_000


def host(name: str = "h1", uid: str = "uid-h1") -> dict[str, Any]:
    return {"metadata": {"namespace": "evals", "name": name, "uid": uid}, "spec": {}}


def episode(rollout: str = "r-1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "evals", "name": "h1-ep-1", "uid": "uid-ep"},
        "spec": {"hostRef": {"name": "h1"}, "rolloutId": rollout},
    }


class Objects:
    """What the broker may read, and every read it made."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.reads: list[tuple[str, str, bool]] = []

    def get_host(self, namespace: str, name: str, *, fresh: bool = False) -> dict[str, Any] | None:
        self.reads.append((namespace, name, fresh))
        return self.objects.get((namespace, name))

    get_episode = get_host


def host_claims(name: str = "h1", uid: str = "uid-h1") -> Claims:
    return Claims(kind="GymHost", namespace="evals", name=name, uid=uid, scope=Scope.HOST, expires_at=FAR)


def refusal(token: str, objects: Objects) -> str | None:
    with pytest.raises(BrokerError) as refused:
        authenticate(f"Bearer {token}", objects, KEY)
    assert refused.value.code == "unauthorized"
    return refused.value.cause


@pytest.mark.parametrize("name", ["h1", "no-such-host"])
def test_a_forged_token_is_refused_before_any_lookup(name: str) -> None:
    """Same answer whether the named object exists or not, and nothing read: no existence oracle."""
    objects = Objects(host())
    assert refusal(issue(host_claims(name), FOREIGN), objects) == "bad_signature"
    assert objects.reads == []


def test_a_signed_token_for_a_gone_object_is_stale_as_a_fresh_read_confirms() -> None:
    """A read the broker keeps for a moment may let a call through, never refuse one."""
    objects = Objects()
    assert refusal(issue(host_claims(), KEY), objects) == "stale_object"
    assert objects.reads == [("evals", "h1", False), ("evals", "h1", True)]


def test_an_accepted_token_needs_no_fresh_read() -> None:
    objects = Objects(host())
    authenticate(f"Bearer {issue(host_claims(), KEY)}", objects, KEY)
    assert objects.reads == [("evals", "h1", False)]


def test_an_expired_token_is_refused_without_a_second_read() -> None:
    objects = Objects(host())
    expired = Claims(
        kind="GymHost", namespace="evals", name="h1", uid="uid-h1", scope=Scope.HOST, expires_at=1
    )
    assert refusal(issue(expired, KEY), objects) == "expired"
    assert objects.reads == [("evals", "h1", False)]


def test_a_host_token_for_a_recreated_host_of_the_same_name_is_stale() -> None:
    assert refusal(issue(host_claims(uid="uid-old"), KEY), Objects(host(uid="uid-new"))) == "stale_object"


def test_a_valid_host_token_speaks_for_its_host() -> None:
    caller = authenticate(f"Bearer {issue(host_claims(), KEY)}", Objects(host()), KEY)
    assert (caller.claims.scope, caller.host_name()) == (Scope.HOST, "h1")


def operate_caller(rollout: str) -> Caller:
    owner = Claims(
        kind="EpisodeSandbox",
        namespace="evals",
        name="h1-ep-1",
        uid="uid-ep",
        scope=Scope.OWNER,
        rollout_id=rollout,
        expires_at=FAR,
    )
    return Caller(operate_claims(owner, FAR), episode(rollout))


def test_an_operate_lease_works_with_the_episodes_own_rollout() -> None:
    authorize_episode(operate_caller("r-1"), episode("r-1"), destroy=False, rollout_id="r-1")


@pytest.mark.parametrize(
    ("lease_rollout", "header", "words"),
    [
        ("r-1", None, "send X-Rollout-Id"),
        ("r-1", "r-2", "send X-Rollout-Id"),
        # Signed by the trusted side, but for another rollout than the episode serves: refused all the same.
        ("r-9", "r-9", "not bound to the episode's own rollout"),
    ],
)
def test_an_operate_lease_is_refused_off_the_episodes_rollout(
    lease_rollout: str, header: str | None, words: str
) -> None:
    with pytest.raises(BrokerError, match=words) as refused:
        authorize_episode(operate_caller(lease_rollout), episode("r-1"), destroy=False, rollout_id=header)
    assert refused.value.code == "forbidden"


def test_an_operate_lease_of_an_earlier_epoch_is_revoked() -> None:
    revoked = {**episode("r-1"), "status": {"operateLeases": {"epoch": 1, "granted": 0}}}
    with pytest.raises(BrokerError, match="this operate lease was revoked"):
        authorize_episode(operate_caller("r-1"), revoked, destroy=False, rollout_id="r-1")


def test_an_operate_lease_cannot_destroy() -> None:
    with pytest.raises(BrokerError, match="not close it or grant leases"):
        authorize_episode(operate_caller("r-1"), episode("r-1"), destroy=True, rollout_id="r-1")
