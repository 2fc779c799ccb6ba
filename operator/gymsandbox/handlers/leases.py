"""Lease Secrets and the signing key: the I/O around the pure token library."""

from __future__ import annotations

import base64
import binascii
import logging
import time
from typing import cast

from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import LEASE_TOKEN_KEY
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.desired.secret import lease_secret
from gymsandbox.handlers.kube import SECRET, Kube, create_or_adopt
from gymsandbox.leases import (
    SIGNING_KEY_SECRET,
    Claims,
    SigningKey,
    TokenError,
    issue,
    key_from_secret,
    verify,
)
from gymsandbox.leases import signing_key_secret as signing_key_manifest
from gymsandbox.leases.tokens import Kind


class SigningKeyError(Exception):
    """The operator cannot hold a signing key, so it cannot issue any lease: it refuses to start."""


def ensure_signing_key(kube: Kube, namespace: str) -> SigningKey:
    """The key in the operator's namespace, created on first start. Only the trusted side reads it."""
    secret = kube.get(SECRET, namespace, SIGNING_KEY_SECRET)
    if secret is None:
        try:
            secret = kube.create(
                SECRET, signing_key_manifest(namespace, SIGNING_KEY_SECRET, SigningKey.generate())
            )
        except ApiException as e:
            if e.status == 404:
                raise SigningKeyError(
                    f"namespace {namespace} does not exist (create it, or pass --operator-namespace)"
                ) from None
            if e.status != 409:
                raise SigningKeyError(
                    f"cannot create Secret {namespace}/{SIGNING_KEY_SECRET}: HTTP {e.status} {e.reason}"
                ) from None
            secret = kube.get(SECRET, namespace, SIGNING_KEY_SECRET)  # another instance made it first
    if secret is None:
        raise SigningKeyError(f"Secret {namespace}/{SIGNING_KEY_SECRET} vanished while being created")
    try:
        return key_from_secret(secret)
    except ValueError as e:
        raise SigningKeyError(str(e)) from None


def wait_for_signing_key(kube: Kube, namespace: str, *, timeout: float, poll: float = 1.0) -> SigningKey:
    """The key the operator creates on its first start, read-only: the broker may read it, never make it."""
    deadline = time.monotonic() + timeout
    waiting_logged = False
    while True:
        try:
            secret = kube.get(SECRET, namespace, SIGNING_KEY_SECRET)
        except ApiException as e:
            raise SigningKeyError(
                f"cannot read Secret {namespace}/{SIGNING_KEY_SECRET}: HTTP {e.status} {e.reason}"
            ) from None
        if secret is not None:
            try:
                return key_from_secret(secret)
            except ValueError as e:
                raise SigningKeyError(str(e)) from None
        if time.monotonic() >= deadline:
            raise SigningKeyError(
                f"Secret {namespace}/{SIGNING_KEY_SECRET} does not exist after {timeout:.0f} s: the operator "
                "creates it on its first start; is the operator running with --operator-namespace "
                f"{namespace}?"
            )
        if not waiting_logged:
            logging.getLogger(__name__).info(
                "waiting for the operator to create Secret %s/%s", namespace, SIGNING_KEY_SECRET
            )
            waiting_logged = True
        time.sleep(poll)


def secret_token(secret: Manifest) -> str | None:
    encoded = (secret.get("data") or {}).get(LEASE_TOKEN_KEY)
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _still_valid(token: str, key: SigningKey, owner: Owner, wanted: Claims, now: int) -> bool:
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
    secret, created = create_or_adopt(kube, lease_secret(owner, token), owner.uid, fresh=fresh)
    name = str(secret["metadata"]["name"])
    current = secret_token(secret)
    if created or (current and _still_valid(current, key, owner, wanted, now)):
        return name, current or token
    kube.replace(SECRET, {**secret, "data": lease_secret(owner, token)["data"]})
    return name, token
