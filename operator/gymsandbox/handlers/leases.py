"""An owner's lease Secret: the I/O around the pure token library."""

from __future__ import annotations

import base64
import binascii
from typing import cast

from gymsandbox.api.names import LEASE_TOKEN_KEY
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.desired.secret import lease_secret
from gymsandbox.handlers.children import apply_write
from gymsandbox.kube.client import SECRET, Kube, create_or_adopt
from gymsandbox.leases import Claims, SigningKey, TokenError, issue, verify
from gymsandbox.leases.tokens import Kind
from gymsandbox.plan.children import plan_lease_secret


def secret_token(secret: Manifest) -> str | None:
    encoded = (secret.get("data") or {}).get(LEASE_TOKEN_KEY)
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None


def token_still_valid(token: str, key: SigningKey, owner: Owner, wanted: Claims, now: int) -> bool:
    """The token verifies for this very object and says what `wanted` says (scope, rollout, expiry)."""
    try:
        claims = verify(
            token,
            key,
            kind=cast(Kind, owner.kind),
            namespace=owner.namespace,
            name=owner.name,
            live_uid=owner.uid,
            scopes={wanted.scope},
            rollout_id=wanted.rollout_id,
            now=now,
        )
    except TokenError:
        return False
    return claims.expires_at == wanted.expires_at


def ensure_lease_secret(
    kube: Kube, owner: Owner, key: SigningKey, wanted: Claims, now: int, *, fresh: bool = False
) -> tuple[str, str]:
    """The owner's lease Secret holds a token valid for `wanted`; a missing, tampered, foreign or outdated
    one (renewed expiry, rotated key) is replaced. Returns (Secret name, token)."""
    token = issue(wanted, key)
    desired = lease_secret(owner, token)
    secret, created = create_or_adopt(kube, desired, owner.uid, fresh=fresh)
    name = str(secret["metadata"]["name"])
    if created:
        return name, token
    current = secret_token(secret)
    valid = current is not None and token_still_valid(current, key, owner, wanted, now)
    write = plan_lease_secret(secret, desired, owner.uid, valid=valid)
    apply_write(kube, SECRET, owner, secret, write)
    return name, current if write.verb == "keep" and current is not None else token
