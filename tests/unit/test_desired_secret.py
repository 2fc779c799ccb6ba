"""The lease Secret: a 256-bit token, stored once, and recognised when it has been emptied or damaged."""

from __future__ import annotations

import base64
import re

import pytest

from gymsandbox.api.names import LEASE_TOKEN_KEY
from gymsandbox.desired.labels import host_labels
from gymsandbox.desired.names import child_name
from gymsandbox.desired.owner import Owner
from gymsandbox.desired.secret import lease_secret, lease_secret_name, new_lease_token, token_present

OWNER = Owner(kind="GymHost", name="swe-gym-run-1", namespace="evals", uid="uid-1")
URL_SAFE_43 = re.compile(r"^[A-Za-z0-9_-]{43}$")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_new_lease_token_is_43_url_safe_characters() -> None:
    assert URL_SAFE_43.match(new_lease_token())


def test_new_lease_token_carries_256_bits() -> None:
    raw = base64.urlsafe_b64decode(new_lease_token() + "=")
    assert len(raw) * 8 == 256


def test_new_lease_tokens_differ() -> None:
    tokens = {new_lease_token() for _ in range(64)}
    assert len(tokens) == 64


def test_lease_secret_name_is_the_owner_child_name() -> None:
    assert lease_secret_name(OWNER) == child_name("swe-gym-run-1", "lease")


def test_lease_secret_stores_the_token_base64_encoded_under_the_token_key() -> None:
    token = new_lease_token()
    data = lease_secret(OWNER, token)["data"]
    assert isinstance(data, dict)
    assert base64.b64decode(data[LEASE_TOKEN_KEY]).decode() == token


def test_lease_secret_holds_only_the_token() -> None:
    data = lease_secret(OWNER, new_lease_token())["data"]
    assert isinstance(data, dict)
    assert list(data) == [LEASE_TOKEN_KEY]


def test_lease_secret_is_an_opaque_secret_owned_and_labelled_by_the_host() -> None:
    secret = lease_secret(OWNER, new_lease_token())
    meta = secret["metadata"]
    assert isinstance(meta, dict)
    assert (secret["kind"], secret["type"], meta["labels"], meta["ownerReferences"]) == (
        "Secret",
        "Opaque",
        host_labels("swe-gym-run-1"),
        [OWNER.reference()],
    )


def test_token_present_for_a_freshly_built_secret() -> None:
    assert token_present(lease_secret(OWNER, new_lease_token()))


TOKEN = "kT3nWcRz0Jq9vXbLm2sYhA4uEoPfG7dI1aK8wN5xZ6c"  # 43 url-safe characters, a test fixture


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param({}, id="no-data"),
        pytest.param({"data": None}, id="data-null"),
        pytest.param({"data": {}}, id="data-empty"),
        pytest.param({"data": {"other": _b64(TOKEN.encode())}}, id="token-key-missing"),
        pytest.param({"data": {LEASE_TOKEN_KEY: ""}}, id="token-empty"),
        pytest.param({"data": {LEASE_TOKEN_KEY: None}}, id="token-null"),
        pytest.param({"data": {LEASE_TOKEN_KEY: 12345}}, id="token-not-a-string"),
        pytest.param({"data": {LEASE_TOKEN_KEY: _b64(TOKEN[:42].encode())}}, id="token-truncated"),
        pytest.param({"data": {LEASE_TOKEN_KEY: _b64(TOKEN.encode())[:-4]}}, id="base64-truncated-whole"),
        pytest.param({"data": {LEASE_TOKEN_KEY: _b64(TOKEN.encode())[:-1]}}, id="base64-truncated-mid"),
        pytest.param({"data": {LEASE_TOKEN_KEY: "not base64 at all!" * 4}}, id="not-base64"),
        pytest.param({"data": {LEASE_TOKEN_KEY: TOKEN}}, id="token-stored-unencoded"),
        pytest.param({"data": {LEASE_TOKEN_KEY: _b64(bytes(range(128, 171)))}}, id="binary-not-a-token"),
    ],
)
def test_token_present_is_false_for_a_missing_or_damaged_token(secret: dict[str, object]) -> None:
    assert not token_present(secret)


def test_token_present_for_a_token_written_by_kubectl() -> None:
    assert token_present({"data": {LEASE_TOKEN_KEY: _b64(TOKEN.encode())}, "type": "Opaque"})
