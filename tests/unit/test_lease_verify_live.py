"""verify_live: a lease token checked against the object as just read from the API server."""

from __future__ import annotations

from typing import Any

import pytest

from gymsandbox.leases.tokens import Claims, Scope, SigningKey, TokenError, issue, verify_live

NOW = 1_700_000_000
EXPIRES = NOW + 3600
KEY = SigningKey.generate()

EPISODE_CLAIMS = Claims(
    kind="EpisodeSandbox",
    namespace="evals",
    name="ep-0001",
    uid="uid-ep-1",
    scope=Scope.OWNER,
    rollout_id="rollout-0001",
    expires_at=EXPIRES,
)
HOST_CLAIMS = Claims(
    kind="GymHost",
    namespace="evals",
    name="swe-gym-run-1",
    uid="uid-host-1",
    scope=Scope.HOST,
    expires_at=EXPIRES,
)
EPISODE_TOKEN = issue(EPISODE_CLAIMS, KEY)
HOST_TOKEN = issue(HOST_CLAIMS, KEY)
EPISODE_SCOPES = frozenset({Scope.OWNER, Scope.OPERATE})


def live(claims: Claims, **metadata: Any) -> dict[str, Any]:
    """The object a token was issued for, as the API server returns it; metadata changes applied."""
    obj: dict[str, Any] = {
        "apiVersion": "gymsandbox.dev/v1alpha1",
        "kind": claims.kind,
        "metadata": {
            "namespace": claims.namespace,
            "name": claims.name,
            "uid": claims.uid,
            "resourceVersion": "42",
            "generation": 1,
        },
        "spec": {},
    }
    obj["metadata"].update(metadata)
    return obj


def check_episode(obj: dict[str, Any], token: str = EPISODE_TOKEN, **options: Any) -> Claims:
    return verify_live(token, KEY, obj, scopes=options.pop("scopes", EPISODE_SCOPES), now=NOW, **options)


def refusal_code(obj: dict[str, Any], token: str = EPISODE_TOKEN) -> str:
    with pytest.raises(TokenError) as caught:
        check_episode(obj, token)
    return caught.value.code


def test_token_for_the_live_episode_is_accepted() -> None:
    assert check_episode(live(EPISODE_CLAIMS)) == EPISODE_CLAIMS


def test_token_for_the_live_host_is_accepted() -> None:
    claims = verify_live(HOST_TOKEN, KEY, live(HOST_CLAIMS), scopes={Scope.HOST}, now=NOW)
    assert claims == HOST_CLAIMS


def test_token_bound_to_the_live_episode_rollout_is_accepted() -> None:
    assert check_episode(live(EPISODE_CLAIMS), rollout_id="rollout-0001") == EPISODE_CLAIMS


def test_token_for_an_object_with_another_uid_is_stale() -> None:
    assert refusal_code(live(EPISODE_CLAIMS, uid="uid-ep-2")) == "stale_object"


def test_token_for_an_object_with_another_name_is_for_the_wrong_object() -> None:
    assert refusal_code(live(EPISODE_CLAIMS, name="ep-0002")) == "wrong_object"


def test_token_for_an_object_in_another_namespace_is_for_the_wrong_object() -> None:
    assert refusal_code(live(EPISODE_CLAIMS, namespace="other")) == "wrong_object"


def test_token_for_an_object_being_deleted_is_stale() -> None:
    assert refusal_code(live(EPISODE_CLAIMS, deletionTimestamp="2025-01-01T00:00:00Z")) == "stale_object"


def test_host_token_for_a_host_being_deleted_is_stale() -> None:
    obj = live(HOST_CLAIMS, deletionTimestamp="2025-01-01T00:00:00Z")
    with pytest.raises(TokenError) as caught:
        verify_live(HOST_TOKEN, KEY, obj, scopes={Scope.HOST}, now=NOW)
    assert caught.value.code == "stale_object"


@pytest.mark.parametrize("kind", ["Pod", "Secret", "gymhost", "episodesandbox", "", None])
def test_object_of_another_kind_is_the_wrong_object(kind: str | None) -> None:
    obj = live(EPISODE_CLAIMS)
    obj["kind"] = kind
    assert refusal_code(obj) == "wrong_object"


def test_object_without_a_kind_is_the_wrong_object() -> None:
    obj = live(EPISODE_CLAIMS)
    del obj["kind"]
    assert refusal_code(obj) == "wrong_object"


def test_episode_token_for_the_host_of_the_same_name_is_the_wrong_object() -> None:
    obj = live(EPISODE_CLAIMS)
    obj["kind"] = "GymHost"
    assert refusal_code(obj) == "wrong_object"


def test_host_token_for_an_episode_is_the_wrong_object() -> None:
    assert refusal_code(live(HOST_CLAIMS) | {"kind": "EpisodeSandbox"}, HOST_TOKEN) == "wrong_object"


def test_object_without_metadata_is_the_wrong_object() -> None:
    assert refusal_code({"kind": "EpisodeSandbox"}) == "wrong_object"


def test_token_signed_with_another_key_is_refused() -> None:
    other = issue(EPISODE_CLAIMS, SigningKey.generate())
    assert refusal_code(live(EPISODE_CLAIMS), other) == "bad_signature"


def test_expired_token_for_the_live_object_is_refused() -> None:
    with pytest.raises(TokenError) as caught:
        verify_live(EPISODE_TOKEN, KEY, live(EPISODE_CLAIMS), scopes=EPISODE_SCOPES, now=EXPIRES)
    assert caught.value.code == "expired"


def test_token_outside_the_allowed_scopes_is_refused() -> None:
    with pytest.raises(TokenError) as caught:
        check_episode(live(EPISODE_CLAIMS), scopes={Scope.OPERATE})
    assert caught.value.code == "wrong_scope"


def test_token_bound_to_another_rollout_is_refused() -> None:
    with pytest.raises(TokenError) as caught:
        check_episode(live(EPISODE_CLAIMS), rollout_id="rollout-0002")
    assert caught.value.code == "wrong_rollout"
