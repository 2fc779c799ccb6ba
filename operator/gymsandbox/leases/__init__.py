"""Lease tokens (HMAC-signed, bound to one live object) and the signing-key Secret. Pure."""

from __future__ import annotations

from gymsandbox.leases.keys import (
    SIGNING_KEY_DATA_KEY,
    SIGNING_KEY_SECRET,
    key_from_secret,
    signing_key_secret,
)
from gymsandbox.leases.tokens import (
    MAX_TOKEN_LENGTH,
    MIN_KEY_BYTES,
    VERSION_PREFIX,
    Claims,
    Kind,
    Scope,
    SigningKey,
    TokenError,
    TokenErrorCode,
    issue,
    lease_epoch,
    new_token_id,
    operate_claims,
    peek,
    verify,
    verify_live,
    verify_signature,
)

__all__ = [
    "MAX_TOKEN_LENGTH",
    "MIN_KEY_BYTES",
    "SIGNING_KEY_DATA_KEY",
    "SIGNING_KEY_SECRET",
    "VERSION_PREFIX",
    "Claims",
    "Kind",
    "Scope",
    "SigningKey",
    "TokenError",
    "TokenErrorCode",
    "issue",
    "key_from_secret",
    "lease_epoch",
    "new_token_id",
    "operate_claims",
    "peek",
    "signing_key_secret",
    "verify",
    "verify_live",
    "verify_signature",
]
