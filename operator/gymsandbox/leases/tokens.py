"""Lease tokens: HMAC-signed claims about one live object, verified in constant time.

Format (version 1, ASCII, at most ``MAX_TOKEN_LENGTH`` characters)::

    gs1.<payload>.<signature>

    payload   = base64url(JSON of the claims, keys sorted, compact separators), no padding
    signature = base64url(HMAC-SHA256(key, "gs1." + payload)), no padding

The payload JSON holds exactly these keys: ``kind``, ``namespace``, ``name``, ``uid``, ``scope``,
``rollout_id`` (null for host tokens), ``expires_at`` (unix seconds), ``token_id`` (96 random bits as
hex, so two tokens with equal claims still differ) and ``kid`` (the signing key's id, so a token signed
with a rotated key can be recognised). The signature covers the version prefix and the payload exactly
as transmitted.

``verify`` checks the token's shape, then the signature with ``hmac.compare_digest``, and only then
decodes and trusts the claims; it raises ``TokenError`` with a stable ``code`` and a message that is
safe to show to the caller (it never contains the token or key material). ``peek`` decodes without
verifying: its result is untrusted and only good for routing.

Pure: no Kubernetes I/O. The signing key is held only by the trusted side (operator and broker).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

VERSION_PREFIX = "gs1"
MAX_TOKEN_LENGTH = 4096  # characters; anything longer is refused before decoding
MIN_KEY_BYTES = 32
TOKEN_ID_BYTES = 12  # 96 bits

Kind = Literal["GymHost", "EpisodeSandbox"]
TokenErrorCode = Literal[
    "malformed",
    "bad_signature",
    "expired",
    "wrong_object",
    "stale_object",
    "wrong_scope",
    "wrong_rollout",
]

_KINDS: dict[str, Kind] = {"GymHost": "GymHost", "EpisodeSandbox": "EpisodeSandbox"}
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN_ID = re.compile(r"[0-9a-f]{24}")
_PAYLOAD_KEYS = frozenset(
    {"kind", "namespace", "name", "uid", "scope", "rollout_id", "expires_at", "token_id", "kid"}
)


class Scope(StrEnum):
    HOST = "host"  # a GymHost's own token: create and manage its episodes
    OWNER = "owner"  # an episode's owner token: everything, including destroy
    OPERATE = "operate"  # a co-lease bound to a rollout: exec and files, never destroy


_SCOPES: dict[str, Scope] = {scope.value: scope for scope in Scope}


class TokenError(Exception):
    """A refused token. ``code`` is stable; ``message`` is safe to return to the caller."""

    def __init__(self, code: TokenErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: TokenErrorCode = code
        self.message = message

    def __repr__(self) -> str:
        return f"TokenError(code={self.code!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message))


def new_token_id() -> str:
    return secrets.token_hex(TOKEN_ID_BYTES)


@dataclass(frozen=True, kw_only=True)
class Claims:
    """What a token says. Construction checks consistency and raises ValueError on nonsense.

    GymHost tokens carry scope ``host`` and no rollout id; EpisodeSandbox tokens carry scope ``owner``
    or ``operate`` and a rollout id.
    """

    kind: Kind
    namespace: str
    name: str
    uid: str
    scope: Scope
    expires_at: int
    rollout_id: str | None = None
    token_id: str = field(default_factory=new_token_id)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {sorted(_KINDS)}")
        for label, value in (("namespace", self.namespace), ("name", self.name), ("uid", self.uid)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{label} must be a non-empty string")
        if not isinstance(self.scope, Scope):
            raise ValueError("scope must be a Scope")
        if isinstance(self.expires_at, bool) or not isinstance(self.expires_at, int) or self.expires_at < 0:
            raise ValueError("expires_at must be a non-negative integer (unix seconds)")
        if not isinstance(self.token_id, str) or not _TOKEN_ID.fullmatch(self.token_id):
            raise ValueError("token_id must be 24 lowercase hex characters")
        self._check_scope()

    def _check_scope(self) -> None:
        if self.kind == "GymHost":
            if self.scope is not Scope.HOST:
                raise ValueError("a GymHost token must have scope 'host'")
            if self.rollout_id is not None:
                raise ValueError("a GymHost token carries no rollout id")
            return
        if self.scope is Scope.HOST:
            raise ValueError("an EpisodeSandbox token must have scope 'owner' or 'operate'")
        if not isinstance(self.rollout_id, str) or not self.rollout_id:
            raise ValueError("an EpisodeSandbox token needs a non-empty rollout id")


class SigningKey:
    """HMAC key material (at least 32 bytes) plus a public key id. Never prints the material."""

    __slots__ = ("_kid", "_material")

    def __init__(self, material: bytes) -> None:
        if not isinstance(material, bytes | bytearray | memoryview):
            raise TypeError("signing key material must be bytes")
        raw = bytes(material)
        if len(raw) < MIN_KEY_BYTES:
            raise ValueError(f"signing key too short: {len(raw)} bytes, need at least {MIN_KEY_BYTES}")
        self._material = raw
        self._kid = hashlib.sha256(raw).hexdigest()[:8]

    @property
    def kid(self) -> str:
        """Public key id: the first 8 hex characters of SHA-256 of the material."""
        return self._kid

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(secrets.token_bytes(MIN_KEY_BYTES))

    @classmethod
    def from_bytes(cls, material: bytes) -> SigningKey:
        return cls(material)

    def to_bytes(self) -> bytes:
        """The raw material, for storing in the signing-key Secret only."""
        return self._material

    def _mac(self, message: bytes) -> bytes:
        return hmac.new(self._material, message, hashlib.sha256).digest()

    def tag(self, purpose: str, message: str) -> str:
        """A short public MAC (8 hex characters) of `message` for `purpose`: whoever holds the key can tell
        later that it made `message`. Apart from tokens, whose signing input starts with the version."""
        return hmac.new(self._material, f"{purpose}\0{message}".encode(), hashlib.sha256).hexdigest()[:8]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SigningKey):
            return NotImplemented
        return hmac.compare_digest(self._material, other._material)

    def __hash__(self) -> int:
        return hash(self.kid)

    def __repr__(self) -> str:
        return f"SigningKey(kid={self.kid!r})"

    __str__ = __repr__


# --- encoding -----------------------------------------------------------------------------------------


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Strict unpadded base64url: alphabet, length and canonical form; anything else is malformed."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise _malformed()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise _malformed() from None
    if _b64encode(raw) != text:  # non-zero trailing bits: another spelling of the same bytes
        raise _malformed()
    return raw


def _signing_input(payload_b64: str) -> bytes:
    return f"{VERSION_PREFIX}.{payload_b64}".encode("ascii")


def _malformed() -> TokenError:
    return TokenError("malformed", "token is malformed")


def _split(token: object) -> tuple[str, bytes]:
    """Shape checks only: returns the payload as transmitted and the decoded signature."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        raise _malformed()
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != VERSION_PREFIX:
        raise _malformed()
    _, payload_b64, signature_b64 = parts
    _b64decode(payload_b64)
    return payload_b64, _b64decode(signature_b64)


def _claims_from_payload(payload_b64: str) -> Claims:
    try:
        document = json.loads(_b64decode(payload_b64).decode("utf-8"))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _malformed() from None
    if not isinstance(document, dict) or set(document) != _PAYLOAD_KEYS:
        raise _malformed()
    kind = _KINDS.get(document["kind"]) if isinstance(document["kind"], str) else None
    scope = _SCOPES.get(document["scope"]) if isinstance(document["scope"], str) else None
    if kind is None or scope is None or not isinstance(document["kid"], str):
        raise _malformed()
    try:
        return Claims(
            kind=kind,
            namespace=document["namespace"],
            name=document["name"],
            uid=document["uid"],
            scope=scope,
            rollout_id=document["rollout_id"],
            expires_at=document["expires_at"],
            token_id=document["token_id"],
        )
    except (ValueError, TypeError):
        raise _malformed() from None


# --- public operations --------------------------------------------------------------------------------


def issue(claims: Claims, key: SigningKey) -> str:
    """Sign ``claims`` with ``key``. Raises ValueError if the result would exceed MAX_TOKEN_LENGTH."""
    document = {
        "kind": claims.kind,
        "namespace": claims.namespace,
        "name": claims.name,
        "uid": claims.uid,
        "scope": claims.scope.value,
        "rollout_id": claims.rollout_id,
        "expires_at": claims.expires_at,
        "token_id": claims.token_id,
        "kid": key.kid,
    }
    payload = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    payload_b64 = _b64encode(payload.encode("ascii"))
    token = f"{VERSION_PREFIX}.{payload_b64}.{_b64encode(key._mac(_signing_input(payload_b64)))}"
    if len(token) > MAX_TOKEN_LENGTH:
        raise ValueError(f"token would exceed {MAX_TOKEN_LENGTH} characters; names are too long")
    return token


def verify(
    token: str,
    key: SigningKey,
    *,
    kind: Kind,
    namespace: str,
    name: str,
    live_uid: str,
    scopes: AbstractSet[Scope],
    rollout_id: str | None = None,
    now: int,
) -> Claims:
    """Verify ``token`` against the live object and return its claims, or raise TokenError.

    Order: shape (``malformed``), signature (``bad_signature``), then, with the claims now trusted,
    ``wrong_object`` (kind/namespace/name), ``stale_object`` (uid: the object was deleted or
    recreated), ``expired`` (``now >= expires_at``), ``wrong_scope`` (scope not in ``scopes``) and
    ``wrong_rollout`` (only when ``rollout_id`` is given and differs from the claim).
    """
    claims = verify_signature(token, key)
    if (claims.kind, claims.namespace, claims.name) != (kind, namespace, name):
        raise TokenError("wrong_object", f"token was not issued for this {kind}")
    if claims.uid != live_uid:
        raise TokenError("stale_object", f"token was issued for a deleted or recreated {kind}")
    if now >= claims.expires_at:
        raise TokenError("expired", "token has expired")
    if claims.scope not in scopes:
        allowed = ", ".join(sorted(scope.value for scope in scopes)) or "none"
        raise TokenError(
            "wrong_scope", f"token scope {claims.scope.value!r} is not allowed here (allowed: {allowed})"
        )
    if rollout_id is not None and claims.rollout_id != rollout_id:
        raise TokenError("wrong_rollout", "token is bound to a different rollout")
    return claims


def verify_signature(token: str, key: SigningKey) -> Claims:
    """The claims of a token signed with ``key``: shape (``malformed``), then the signature
    (``bad_signature``). Nothing about any object is checked yet: a caller looks up the object these claims
    name only now, so a forged token learns nothing about which objects exist."""
    payload_b64, signature = _split(token)
    if not hmac.compare_digest(key._mac(_signing_input(payload_b64)), signature):
        raise TokenError("bad_signature", "token signature is not valid")
    return _claims_from_payload(payload_b64)


def verify_live(
    token: str,
    key: SigningKey,
    live: Mapping[str, Any],
    *,
    scopes: AbstractSet[Scope],
    rollout_id: str | None = None,
    now: int,
) -> Claims:
    """Verify ``token`` against ``live``, the object as just read from the API server.

    The one check callers need: everything ``verify`` checks, with kind, namespace, name and uid taken from
    the object itself, and an object that is being deleted counts as gone (``stale_object``).
    """
    meta = live.get("metadata") or {}
    kind = live.get("kind")
    if kind not in ("GymHost", "EpisodeSandbox"):
        raise TokenError("wrong_object", "tokens are issued only for GymHost and EpisodeSandbox objects")
    claims = verify(
        token,
        key,
        kind=kind,
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        live_uid=str(meta.get("uid")),
        scopes=scopes,
        rollout_id=rollout_id,
        now=now,
    )
    if meta.get("deletionTimestamp"):
        raise TokenError("stale_object", f"the {kind} is being deleted")
    return claims


def peek(token: str) -> Claims:
    """Decode the claims WITHOUT checking the signature. UNTRUSTED: use only to route a request
    (e.g. to find which episode's live object to verify against), never to authorise it."""
    payload_b64, _ = _split(token)
    return _claims_from_payload(payload_b64)


def operate_claims(owner: Claims, expires_at: int, epoch: int = 0) -> Claims:
    """Derive an ``operate`` lease from a verified ``owner`` lease of the same episode.

    The result is bound to the owner's rollout (the episode's own), never outlives the owner lease (its
    expiry is clamped) and has a fresh token id whose first 8 hex digits are `epoch`: revoking an episode's
    operate leases moves its epoch on, and leases of an older one are refused (`lease_epoch`). Raises
    TokenError("wrong_scope") if ``owner`` is not an owner lease, ValueError on a negative expiry or an
    epoch outside 0..2**32-1.
    """
    if owner.scope is not Scope.OWNER:
        raise TokenError("wrong_scope", "only an owner lease can grant an operate lease")
    if not 0 <= epoch < 2**32:
        raise ValueError("epoch must be within 0..2**32-1")
    token_id = f"{epoch:08x}{new_token_id()[8:]}"
    return replace(
        owner, scope=Scope.OPERATE, expires_at=min(expires_at, owner.expires_at), token_id=token_id
    )


def lease_epoch(claims: Claims) -> int:
    """The revocation epoch an operate lease was granted in (see `operate_claims`)."""
    return int(claims.token_id[:8], 16)
