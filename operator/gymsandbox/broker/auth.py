"""Who is calling: a lease token from the Authorization header, verified against the live object it names.

A `host` token speaks for its GymHost and every episode under it; an `owner` token for one episode; an
`operate` token may use one episode (exec, files) but not destroy it or grant leases, and only together
with the rollout id it is bound to (header X-Rollout-Id).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gymsandbox.broker.errors import BrokerError
from gymsandbox.desired.owner import Manifest
from gymsandbox.leases import (
    Claims,
    Scope,
    SigningKey,
    TokenError,
    lease_epoch,
    verify_live,
    verify_signature,
)

EVERY_SCOPE = frozenset(Scope)


class LiveObjects(Protocol):
    """Reads that may be a moment old unless `fresh` (broker/recent.py)."""

    def get_host(self, namespace: str, name: str, *, fresh: bool = False) -> Manifest | None: ...
    def get_episode(self, namespace: str, name: str, *, fresh: bool = False) -> Manifest | None: ...


@dataclass(frozen=True)
class Caller:
    claims: Claims
    live: Mapping[str, Any]  # the object the token was issued for, as just read

    @property
    def namespace(self) -> str:
        return self.claims.namespace

    def host_name(self) -> str:
        """The GymHost this caller acts within."""
        if self.claims.scope == Scope.HOST:
            return self.claims.name
        return str((self.live.get("spec") or {}).get("hostRef", {}).get("name"))


def bearer_token(header: str | None) -> str:
    if not header:
        raise BrokerError(
            "unauthorized", "missing Authorization header (Bearer <lease token>)", cause="missing_header"
        )
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise BrokerError(
            "unauthorized", "the Authorization header must be 'Bearer <lease token>'", cause="not_bearer"
        )
    return token.strip()


def authenticate(header: str | None, objects: LiveObjects, key: SigningKey) -> Caller:
    """Verify the token against the live object it claims to be for; every failure is 401 `unauthorized`."""
    token = bearer_token(header)
    try:
        signed = verify_signature(token, key)  # before any lookup: no existence oracle for forged tokens
        getter = objects.get_host if signed.kind == "GymHost" else objects.get_episode

        def verified(fresh: bool) -> Caller:
            live = getter(signed.namespace, signed.name, fresh=fresh)
            if live is None:
                raise TokenError(
                    "stale_object", f"the {signed.kind} this token was issued for no longer exists"
                )
            claims = verify_live(
                token, key, {**live, "kind": signed.kind}, scopes=EVERY_SCOPE, now=int(time.time())
            )
            return Caller(claims, live)

        try:
            return verified(fresh=False)
        except TokenError as e:
            if e.code != "stale_object":
                raise
            return verified(fresh=True)  # gone or replaced, as a kept read says: the API server decides
    except TokenError as e:
        raise BrokerError("unauthorized", f"invalid lease token: {e.message}", cause=e.code) from None


def require_host(caller: Caller) -> None:
    if caller.claims.scope != Scope.HOST:
        raise BrokerError("forbidden", "this call needs the host's lease token")


def authorize_episode(
    caller: Caller, episode: Mapping[str, Any], *, destroy: bool, rollout_id: str | None
) -> None:
    """May this caller act on `episode`? `destroy` covers delete and granting leases."""
    meta = episode["metadata"]
    claims = caller.claims
    if claims.scope == Scope.HOST:
        host_ref = (episode.get("spec") or {}).get("hostRef", {}).get("name")
        if meta["namespace"] != claims.namespace or host_ref != claims.name:
            raise BrokerError("episode_not_found", f"episode {meta['name']} not found")
        return
    if (meta["namespace"], meta["name"], meta["uid"]) != (claims.namespace, claims.name, claims.uid):
        raise BrokerError("forbidden", "this lease is for another episode")
    if claims.scope == Scope.OPERATE:
        if destroy:
            raise BrokerError(
                "forbidden", "an operate lease may use an episode but not close it or grant leases"
            )
        if rollout_id != claims.rollout_id:
            raise BrokerError("forbidden", "an operate lease is bound to its rollout: send X-Rollout-Id")
        if claims.rollout_id != (episode.get("spec") or {}).get("rolloutId"):
            raise BrokerError("forbidden", "this operate lease is not bound to the episode's own rollout")
        if lease_epoch(claims) != operate_leases(episode)[0]:
            raise BrokerError("forbidden", "this operate lease was revoked")


def operate_leases(episode: Mapping[str, Any]) -> tuple[int, int]:
    """(epoch, granted) of the episode's operate leases, from the status the broker writes."""
    leases = (episode.get("status") or {}).get("operateLeases") or {}
    return int(leases.get("epoch") or 0), int(leases.get("granted") or 0)
