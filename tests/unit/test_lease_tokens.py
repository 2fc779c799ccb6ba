"""Lease tokens: signed claims bound to one live object; every refusal has its own stable code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import pickle
from dataclasses import replace
from typing import Any

import pytest

from gymsandbox.leases import tokens
from gymsandbox.leases.tokens import (
    MAX_TOKEN_LENGTH,
    Claims,
    Scope,
    SigningKey,
    TokenError,
    issue,
    lease_epoch,
    operate_claims,
    peek,
    verify,
)

NOW = 1_700_000_000
EXPIRES = NOW + 3600
KEY = SigningKey.from_bytes(bytes(range(32)))
OTHER_KEY = SigningKey.from_bytes(bytes(range(1, 33)))

OWNER = Claims(
    kind="EpisodeSandbox",
    namespace="evals",
    name="ep-1",
    uid="uid-1",
    scope=Scope.OWNER,
    rollout_id="rollout-1",
    expires_at=EXPIRES,
)
HOST = Claims(
    kind="GymHost", namespace="evals", name="host-1", uid="host-uid", scope=Scope.HOST, expires_at=EXPIRES
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signed(payload: bytes, key: bytes = KEY.to_bytes()) -> str:
    """A token whose signature is valid for any payload bytes: exercises parsing after the signature."""
    payload_b64 = _b64(payload)
    signature = hmac.new(key, f"gs1.{payload_b64}".encode(), hashlib.sha256).digest()
    return f"gs1.{payload_b64}.{_b64(signature)}"


def _document(claims: Claims = OWNER) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(_unb64(issue(claims, KEY).split(".")[1]))
    return document


def _verify_episode(token: str, **overrides: Any) -> Claims:
    arguments: dict[str, Any] = {
        "kind": "EpisodeSandbox",
        "namespace": "evals",
        "name": "ep-1",
        "live_uid": "uid-1",
        "scopes": {Scope.OWNER, Scope.OPERATE},
        "now": NOW,
    }
    arguments.update(overrides)
    return verify(token, KEY, **arguments)


def _code(token: str, **overrides: Any) -> str:
    with pytest.raises(TokenError) as refused:
        _verify_episode(token, **overrides)
    return refused.value.code


# --- round trip -----------------------------------------------------------------------------------------


def test_owner_token_round_trips() -> None:
    assert _verify_episode(issue(OWNER, KEY)) == OWNER


def test_host_token_round_trips() -> None:
    token = issue(HOST, KEY)
    claims = verify(
        token,
        KEY,
        kind="GymHost",
        namespace="evals",
        name="host-1",
        live_uid="host-uid",
        scopes={Scope.HOST},
        now=NOW,
    )
    assert claims == HOST


def test_matching_rollout_is_accepted() -> None:
    assert _verify_episode(issue(OWNER, KEY), rollout_id="rollout-1") == OWNER


def test_token_has_three_dot_separated_parts_with_version_prefix() -> None:
    prefix, payload, signature = issue(OWNER, KEY).split(".")
    assert prefix == "gs1"
    assert "=" not in payload + signature


def test_payload_is_compact_sorted_json_naming_the_key_id() -> None:
    payload = _unb64(issue(OWNER, KEY).split(".")[1]).decode()
    document = json.loads(payload)
    assert payload == json.dumps(document, sort_keys=True, separators=(",", ":"))
    assert document["kid"] == KEY.kid


def test_signature_is_hmac_sha256_over_prefix_and_payload() -> None:
    _, payload, signature = issue(OWNER, KEY).split(".")
    expected = hmac.new(KEY.to_bytes(), f"gs1.{payload}".encode(), hashlib.sha256).digest()
    assert _unb64(signature) == expected


def test_tokens_with_equal_claims_differ_by_token_id() -> None:
    first = replace(OWNER, token_id=tokens.new_token_id())
    second = replace(OWNER, token_id=tokens.new_token_id())
    assert issue(first, KEY) != issue(second, KEY)


def test_token_id_is_96_random_bits_in_hex() -> None:
    assert len(bytes.fromhex(OWNER.token_id)) * 8 == 96


def test_verify_uses_constant_time_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("gymsandbox.leases.tokens.hmac.compare_digest", spy)
    _verify_episode(issue(OWNER, KEY))
    assert len(calls) == 1


# --- refusals -------------------------------------------------------------------------------------------


def test_tampered_payload_is_refused() -> None:
    prefix, _, signature = issue(OWNER, KEY).split(".")
    forged = _b64(json.dumps({**_document(), "expires_at": EXPIRES + 10**6}).encode())
    assert _code(f"{prefix}.{forged}.{signature}") == "bad_signature"


def test_tampered_signature_is_refused() -> None:
    prefix, payload, signature = issue(OWNER, KEY).split(".")
    flipped = bytearray(_unb64(signature))
    flipped[0] ^= 0x01
    assert _code(f"{prefix}.{payload}.{_b64(bytes(flipped))}") == "bad_signature"


def test_truncated_signature_is_refused() -> None:
    prefix, payload, signature = issue(OWNER, KEY).split(".")
    assert _code(f"{prefix}.{payload}.{_b64(_unb64(signature)[:16])}") == "bad_signature"


def test_token_signed_with_another_key_is_refused() -> None:
    assert _code(issue(OWNER, OTHER_KEY)) == "bad_signature"


def test_signature_is_checked_before_claims_are_trusted() -> None:
    other_object = replace(OWNER, name="ep-2", expires_at=NOW - 1)
    assert _code(issue(other_object, OTHER_KEY)) == "bad_signature"


def test_expired_token_is_refused() -> None:
    assert _code(issue(OWNER, KEY), now=EXPIRES + 1) == "expired"


def test_token_at_its_expiry_second_is_expired() -> None:
    assert _code(issue(OWNER, KEY), now=EXPIRES) == "expired"


def test_token_for_another_object_name_is_refused() -> None:
    assert _code(issue(OWNER, KEY), name="ep-2") == "wrong_object"


def test_token_for_another_namespace_is_refused() -> None:
    assert _code(issue(OWNER, KEY), namespace="other") == "wrong_object"


def test_host_token_is_refused_for_an_episode() -> None:
    assert _code(issue(HOST, KEY), name="host-1", live_uid="host-uid") == "wrong_object"


def test_token_for_recreated_object_is_refused() -> None:
    assert _code(issue(OWNER, KEY), live_uid="uid-2") == "stale_object"


def test_operate_token_cannot_destroy() -> None:
    operate = operate_claims(OWNER, EXPIRES)
    assert _code(issue(operate, KEY), scopes={Scope.OWNER}) == "wrong_scope"


def test_no_accepted_scope_refuses_everything() -> None:
    assert _code(issue(OWNER, KEY), scopes=frozenset()) == "wrong_scope"


def test_token_for_another_rollout_is_refused() -> None:
    assert _code(issue(OWNER, KEY), rollout_id="rollout-2") == "wrong_rollout"


def test_host_token_refused_when_a_rollout_is_required() -> None:
    with pytest.raises(TokenError) as refused:
        verify(
            issue(HOST, KEY),
            KEY,
            kind="GymHost",
            namespace="evals",
            name="host-1",
            live_uid="host-uid",
            scopes={Scope.HOST},
            rollout_id="rollout-1",
            now=NOW,
        )
    assert refused.value.code == "wrong_rollout"


def _valid_parts() -> list[str]:
    return issue(OWNER, KEY).split(".")


MALFORMED_UNSIGNED = {
    "empty": "",
    "huge": "gs1." + "A" * MAX_TOKEN_LENGTH + ".AAAA",
    "three dots": "...",
    "one part": "gs1",
    "two parts": "gs1.abc",
    "four parts": "gs1.abc.def.ghi",
    "unknown version": ".".join(["gs2", *_valid_parts()[1:]]),
    "no version": ".".join(["", *_valid_parts()[1:]]),
    "non-ascii": "gs1.é.abc",
    "non-base64 payload": "gs1.ab$d.AAAA",
    "non-base64 signature": f"gs1.{_valid_parts()[1]}.a+b/",
    "padded signature": f"gs1.{_valid_parts()[1]}.{_valid_parts()[2]}=",
    "impossible base64 length": f"gs1.{_valid_parts()[1]}.AAAAA",
    "whitespace": " " + issue(OWNER, KEY),
    "bearer prefix": "Bearer " + issue(OWNER, KEY),
}


@pytest.mark.parametrize("token", MALFORMED_UNSIGNED.values(), ids=MALFORMED_UNSIGNED.keys())
def test_junk_is_malformed(token: str) -> None:
    assert _code(token) == "malformed"


def test_non_canonical_base64_signature_is_malformed() -> None:
    prefix, payload, signature = _valid_parts()
    # 32 bytes -> 43 characters; the last carries 2 unused bits, which canonical encoding leaves at zero.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet[alphabet.index(signature[-1]) | 1]
    assert _code(f"{prefix}.{payload}.{signature[:-1]}{last}") == "malformed"


def test_non_string_token_is_malformed() -> None:
    assert _code(None) == "malformed"  # type: ignore[arg-type]


def _without(field: str) -> dict[str, Any]:
    document = _document()
    del document[field]
    return document


SIGNED_JUNK: dict[str, bytes] = {
    "not json": b"not json",
    "json list": json.dumps([_document()]).encode(),
    "json string": b'"gs1"',
    "not utf-8": b"\xff\xfe\xfd",
    "deep nesting": b"[" * 1500 + b"]" * 1500,
    "missing uid": json.dumps(_without("uid")).encode(),
    "missing expires_at": json.dumps(_without("expires_at")).encode(),
    "missing kid": json.dumps(_without("kid")).encode(),
    "extra field": json.dumps({**_document(), "admin": True}).encode(),
    "unknown kind": json.dumps({**_document(), "kind": "Pod"}).encode(),
    "unknown scope": json.dumps({**_document(), "scope": "root"}).encode(),
    "expiry as string": json.dumps({**_document(), "expires_at": str(EXPIRES)}).encode(),
    "expiry as bool": json.dumps({**_document(), "expires_at": True}).encode(),
    "expiry as float": json.dumps({**_document(), "expires_at": EXPIRES + 0.5}).encode(),
    "name as number": json.dumps({**_document(), "name": 1}).encode(),
    "empty uid": json.dumps({**_document(), "uid": ""}).encode(),
    "short token id": json.dumps({**_document(), "token_id": "abc"}).encode(),
    "episode without rollout": json.dumps({**_document(), "rollout_id": None}).encode(),
    "host scope on episode": json.dumps({**_document(), "scope": "host"}).encode(),
    "host with rollout": json.dumps({**_document(HOST), "rollout_id": "r"}).encode(),
}


@pytest.mark.parametrize("payload", SIGNED_JUNK.values(), ids=SIGNED_JUNK.keys())
def test_correctly_signed_junk_is_malformed(payload: bytes) -> None:
    assert len(_signed(payload)) <= MAX_TOKEN_LENGTH
    assert _code(_signed(payload)) == "malformed"


def test_unsigned_junk_payload_is_refused_by_signature_before_parsing() -> None:
    assert _code(_signed(b"[1, 2, 3]", key=OTHER_KEY.to_bytes())) == "bad_signature"


# --- peek -----------------------------------------------------------------------------------------------


def test_peek_reads_claims_without_the_key() -> None:
    assert peek(issue(OWNER, OTHER_KEY)) == OWNER


@pytest.mark.parametrize("token", ["", "gs1.a.b.c", "gs1.ab$d.AAAA", _signed(b"[]")])
def test_peek_refuses_junk_as_malformed(token: str) -> None:
    with pytest.raises(TokenError) as refused:
        peek(token)
    assert refused.value.code == "malformed"


# --- operate leases -------------------------------------------------------------------------------------


def test_operate_claims_are_operate_scope_for_the_same_object() -> None:
    operate = operate_claims(OWNER, EXPIRES - 60)
    assert (operate.kind, operate.namespace, operate.name, operate.uid) == (
        "EpisodeSandbox",
        "evals",
        "ep-1",
        "uid-1",
    )
    assert (operate.scope, operate.rollout_id, operate.expires_at) == (
        Scope.OPERATE,
        OWNER.rollout_id,
        EXPIRES - 60,
    )


def test_operate_claims_never_outlive_the_owner() -> None:
    assert operate_claims(OWNER, EXPIRES + 10**6).expires_at == EXPIRES


def test_operate_claims_get_a_fresh_token_id() -> None:
    assert operate_claims(OWNER, EXPIRES).token_id != OWNER.token_id


def test_operate_claims_refused_from_an_operate_lease() -> None:
    operate = operate_claims(OWNER, EXPIRES)
    with pytest.raises(TokenError) as refused:
        operate_claims(operate, EXPIRES)
    assert refused.value.code == "wrong_scope"


def test_operate_claims_refused_from_a_host_lease() -> None:
    with pytest.raises(TokenError) as refused:
        operate_claims(HOST, EXPIRES)
    assert refused.value.code == "wrong_scope"


def test_operate_token_verifies_for_operate_scope_and_its_rollout() -> None:
    operate = operate_claims(OWNER, EXPIRES)
    assert _verify_episode(issue(operate, KEY), scopes={Scope.OPERATE}, rollout_id="rollout-1") == operate


# --- claims ---------------------------------------------------------------------------------------------


def test_episode_claims_need_a_rollout_id() -> None:
    with pytest.raises(ValueError, match="rollout id"):
        Claims(
            kind="EpisodeSandbox", namespace="evals", name="ep-1", uid="u", scope=Scope.OWNER, expires_at=1
        )


def test_host_claims_need_host_scope() -> None:
    with pytest.raises(ValueError, match="scope 'host'"):
        Claims(kind="GymHost", namespace="evals", name="h", uid="u", scope=Scope.OWNER, expires_at=1)


def test_issue_refuses_claims_that_would_exceed_the_size_limit() -> None:
    huge = replace(OWNER, name="n" * MAX_TOKEN_LENGTH)
    with pytest.raises(ValueError, match="exceed"):
        issue(huge, KEY)


# --- keys and errors never show secrets ------------------------------------------------------------------


def _spellings(raw: bytes) -> list[str]:
    return [
        repr(raw),
        raw.hex(),
        base64.b64encode(raw).decode(),
        _b64(raw),
    ]


def test_signing_key_repr_and_str_show_only_the_key_id() -> None:
    assert repr(KEY) == str(KEY) == f"SigningKey(kid={KEY.kid!r})"


def test_signing_key_repr_never_contains_key_material() -> None:
    key = SigningKey.generate()
    for shown in (repr(key), str(key), f"{key}", repr([key])):
        assert not any(spelling in shown for spelling in _spellings(key.to_bytes()))


def test_signing_key_id_is_a_sha256_prefix() -> None:
    assert KEY.kid == hashlib.sha256(KEY.to_bytes()).hexdigest()[:8]


def test_generated_keys_are_32_random_bytes() -> None:
    first, second = SigningKey.generate(), SigningKey.generate()
    assert len(first.to_bytes()) == 32
    assert first != second


def test_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="too short"):
        SigningKey.from_bytes(b"k" * 31)


def test_key_from_text_is_refused() -> None:
    with pytest.raises(TypeError):
        SigningKey.from_bytes("k" * 32)  # type: ignore[arg-type]


def test_keys_with_equal_material_are_equal() -> None:
    assert SigningKey.from_bytes(KEY.to_bytes()) == KEY


def test_token_error_never_contains_the_token_or_key() -> None:
    token = issue(OWNER, OTHER_KEY)
    with pytest.raises(TokenError) as refused:
        _verify_episode(token)
    error = refused.value
    shown = " ".join([repr(error), str(error), error.message, repr(error.args)])
    secrets = [token, *token.split(".")[1:], *_spellings(KEY.to_bytes()), *_spellings(OTHER_KEY.to_bytes())]
    assert not any(secret in shown for secret in secrets)


def test_token_error_repr_shows_code_and_message() -> None:
    assert (
        repr(TokenError("expired", "token has expired"))
        == "TokenError(code='expired', message='token has expired')"
    )


def test_token_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(TokenError("wrong_scope", "no")))  # noqa: S301 - our own bytes
    assert (error.code, error.message) == ("wrong_scope", "no")


def test_operate_claims_carry_their_revocation_epoch() -> None:
    assert lease_epoch(operate_claims(OWNER, EXPIRES)) == 0
    assert lease_epoch(operate_claims(OWNER, EXPIRES, epoch=7)) == 7
    assert lease_epoch(operate_claims(OWNER, EXPIRES, epoch=2**32 - 1)) == 2**32 - 1
    with pytest.raises(ValueError, match="epoch"):
        operate_claims(OWNER, EXPIRES, epoch=2**32)
