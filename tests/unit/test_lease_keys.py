"""The signing-key Secret: one Opaque Secret, read back exactly, refused clearly when damaged."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.kube.signing import SigningKeyError, wait_for_signing_key
from gymsandbox.leases import SIGNING_KEY_SECRET, SigningKey, key_from_secret, signing_key_secret
from gymsandbox.leases.keys import SIGNING_KEY_DATA_KEY

KEY = SigningKey.from_bytes(bytes(range(100, 132)))


def _secret(key: SigningKey = KEY) -> dict[str, Any]:
    return signing_key_secret("gymsandbox-system", SIGNING_KEY_SECRET, key)


def _with_data(value: object) -> dict[str, Any]:
    return {**_secret(), "data": {SIGNING_KEY_DATA_KEY: value}}


def test_secret_name_is_fixed() -> None:
    assert SIGNING_KEY_SECRET == "gymsandbox-lease-signing-key"


def test_secret_is_an_opaque_v1_secret() -> None:
    secret = _secret()
    assert (secret["apiVersion"], secret["kind"], secret["type"]) == ("v1", "Secret", "Opaque")


def test_secret_metadata_names_namespace_and_managed_by_label() -> None:
    assert _secret()["metadata"] == {
        "name": SIGNING_KEY_SECRET,
        "namespace": "gymsandbox-system",
        "labels": {LABEL_MANAGED_BY: MANAGED_BY},
    }


def test_secret_holds_only_the_base64_key_under_signing_key() -> None:
    assert _secret()["data"] == {"signing-key": base64.b64encode(KEY.to_bytes()).decode()}


def test_key_round_trips_through_the_secret() -> None:
    assert key_from_secret(_secret()).to_bytes() == KEY.to_bytes()


def test_generated_key_round_trips_with_its_key_id() -> None:
    key = SigningKey.generate()
    assert key_from_secret(_secret(key)).kid == key.kid


def test_longer_key_is_accepted() -> None:
    long_key = SigningKey.from_bytes(b"x" * 64)
    assert key_from_secret(_secret(long_key)) == long_key


@pytest.mark.parametrize(
    ("secret", "complaint"),
    [
        ({"metadata": {"name": SIGNING_KEY_SECRET}}, "no data"),
        ({"data": None}, "no data"),
        ({"data": {}}, "no data"),
        ({"data": {"other": "eA=="}}, "no data"),
        ({"data": "not a mapping"}, "no data"),
    ],
    ids=["no data field", "null data", "empty data", "other key", "data not a mapping"],
)
def test_missing_key_is_refused(secret: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        key_from_secret(secret)


def test_short_key_is_refused_with_its_size() -> None:
    with pytest.raises(ValueError, match="holds 16 bytes, need at least 32"):
        key_from_secret(_with_data(base64.b64encode(b"k" * 16).decode()))


def test_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="holds 0 bytes"):
        key_from_secret(_with_data(""))


@pytest.mark.parametrize(
    "value", ["not base64!", "abc", "a" * 43 + "$"], ids=["junk", "bad padding", "bad char"]
)
def test_corrupt_base64_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not valid base64"):
        key_from_secret(_with_data(value))


def test_non_string_value_is_refused() -> None:
    with pytest.raises(ValueError, match="not a base64 string"):
        key_from_secret(_with_data(12345))


def test_error_names_the_secret() -> None:
    with pytest.raises(ValueError, match=f"Secret gymsandbox-system/{SIGNING_KEY_SECRET}"):
        key_from_secret(_with_data(""))


def test_errors_never_contain_key_material() -> None:
    short = b"\x01\x02secret-ish-bytes"
    encoded = base64.b64encode(short).decode()
    with pytest.raises(ValueError, match="need at least") as refused:
        key_from_secret(_with_data(encoded))
    shown = f"{refused.value!s} {refused.value!r}"
    assert encoded not in shown
    assert short.hex() not in shown
    assert repr(short) not in shown


class SecretReads:
    """Answers GETs of the signing key from a script: None (404), a Secret, or an ApiException."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def get(self, kind: object, namespace: str, name: str) -> object:
        assert (namespace, name) == ("gymsandbox-system", SIGNING_KEY_SECRET)
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_broker_waits_for_the_key_the_operator_creates() -> None:
    reads = SecretReads(None, None, _secret())
    key = wait_for_signing_key(reads, "gymsandbox-system", timeout=5, poll=0)  # type: ignore[arg-type]
    assert key.kid == KEY.kid
    assert reads.calls == 3


def test_the_broker_gives_up_naming_the_secret_and_the_operator() -> None:
    with pytest.raises(
        SigningKeyError, match=r"gymsandbox-system/gymsandbox-lease-signing-key does not exist"
    ):
        wait_for_signing_key(SecretReads(None), "gymsandbox-system", timeout=0, poll=0)  # type: ignore[arg-type]


def test_a_forbidden_read_is_refused_at_once_without_the_response_body() -> None:
    denied = ApiException(status=403, reason="Forbidden")
    denied.body = "secret material would be here"
    with pytest.raises(SigningKeyError) as caught:
        wait_for_signing_key(SecretReads(denied), "gymsandbox-system", timeout=60, poll=0)  # type: ignore[arg-type]
    assert "HTTP 403 Forbidden" in str(caught.value)
    assert "secret material" not in str(caught.value)


def test_a_damaged_key_is_refused() -> None:
    with pytest.raises(SigningKeyError):
        wait_for_signing_key(SecretReads(_with_data("!!")), "gymsandbox-system", timeout=5, poll=0)  # type: ignore[arg-type]
