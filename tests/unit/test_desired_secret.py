"""The lease Secret: one token under one key, owned and labelled like every child."""

from __future__ import annotations

import base64

from gymsandbox.api.names import LEASE_TOKEN_KEY
from gymsandbox.desired.labels import child_labels
from gymsandbox.desired.names import child_name
from gymsandbox.desired.secret import lease_secret, lease_secret_name
from tests.unit.conftest import OWNER

TOKEN = "gs1.payload.signature"


def test_lease_secret_name_is_the_owner_child_name() -> None:
    assert lease_secret_name(OWNER) == child_name("swe-gym-run-1", "lease")


def test_lease_secret_stores_the_token_base64_encoded_under_the_token_key() -> None:
    token = TOKEN
    data = lease_secret(OWNER, token)["data"]
    assert isinstance(data, dict)
    assert base64.b64decode(data[LEASE_TOKEN_KEY]).decode() == token


def test_lease_secret_holds_only_the_token() -> None:
    data = lease_secret(OWNER, TOKEN)["data"]
    assert isinstance(data, dict)
    assert list(data) == [LEASE_TOKEN_KEY]


def test_lease_secret_is_an_opaque_secret_owned_and_labelled_by_the_host() -> None:
    secret = lease_secret(OWNER, TOKEN)
    meta = secret["metadata"]
    assert isinstance(meta, dict)
    assert (secret["kind"], secret["type"], meta["labels"], meta["ownerReferences"]) == (
        "Secret",
        "Opaque",
        child_labels(OWNER),
        [OWNER.reference()],
    )
