"""The lease Secret: the only place the host's token lives."""

from __future__ import annotations

import base64
import re
import secrets

from gymsandbox.api.names import LEASE_TOKEN_KEY
from gymsandbox.desired.labels import host_labels
from gymsandbox.desired.names import child_name
from gymsandbox.desired.owner import Manifest, Owner

TOKEN_BYTES = 32  # 256 bits
TOKEN_LENGTH = 43  # characters of TOKEN_BYTES in unpadded base64url
_TOKEN_CHARACTERS = re.compile(rb"[A-Za-z0-9_-]+")  # the base64url alphabet new_lease_token uses


def new_lease_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def lease_secret_name(owner: Owner) -> str:
    return child_name(owner.name, "lease")


def lease_secret(owner: Owner, token: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": owner.metadata(lease_secret_name(owner), host_labels(owner.name)),
        "type": "Opaque",
        "immutable": False,
        "data": {LEASE_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def token_present(secret: Manifest) -> bool:
    """True when the Secret still carries a token of the issued size (it was not emptied or truncated)."""
    encoded = (secret.get("data") or {}).get(LEASE_TOKEN_KEY)
    if not isinstance(encoded, str):
        return False
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except ValueError:
        return False
    # Text the handler can decode and pass on: a binary value of the right size is not a token.
    return len(decoded) >= TOKEN_LENGTH and _TOKEN_CHARACTERS.fullmatch(decoded) is not None
