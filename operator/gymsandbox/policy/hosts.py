"""A GymHost's whole verdict, decided in one place: its spec against cluster policy, the Secrets and claims it
names, and its lifetime. The host's own reconcile and the admission of every episode under it read this one
verdict, so an episode is admitted only under a host that may run: a host refused for its claim (or for an
envFrom Secret, or past its expiry) lends nothing to its episodes, which mount that claim read-write.

Refusals that only resolving the host's egress names can find (a name resolving into a denied network) are
the host's own reconcile's: its episodes resolve their own allowlists and are refused on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.policy.admission import Refusal, admit_gymhost, host_ttl_seconds
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.references import refused_references


@dataclass(frozen=True)
class HostReferences:
    """The objects a host names, as read: each Secret of envFrom and each claim by name (None: missing)."""

    secrets: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    claims: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class HostVerdict:
    """Whether the host may run. `spec` is None when it does not parse; `expires_at` once it does."""

    spec: GymHostSpec | None
    refusal: Refusal | None = None
    expires_at: datetime | None = None
    expired: bool = False

    @property
    def runs(self) -> bool:
        return self.spec is not None and self.refusal is None and not self.expired

    def why_not(self, name: str) -> str | None:
        """Why no episode may run under the host named `name` (their HostNotReady message); None: they may."""
        if self.spec is None:
            return f"GymHost {name} has an invalid spec"
        if self.refusal is not None:
            return f"GymHost {name} is refused: {self.refusal.message}"
        if self.expired:
            return f"GymHost {name} expired at {self.expires_at:%Y-%m-%dT%H:%M:%SZ}"
        return None


def refused_by_host(host_name: str, verdict: HostVerdict) -> Refusal | None:
    """An episode's refusal for its host alone: none only under a host whose whole verdict is yes."""
    why_not = verdict.why_not(host_name)
    return None if why_not is None else Refusal(Reason.HOST_NOT_READY, why_not)


def parse_host_spec(raw: Mapping[str, Any]) -> GymHostSpec | Refusal:
    try:
        return GymHostSpec.model_validate(dict(raw))
    except ValidationError as e:
        return Refusal(Reason.INVALID_SPEC, validation_message(e))


def host_expiry(created: datetime, spec: GymHostSpec, policy: ClusterPolicy) -> datetime:
    """Creation plus the TTL (the cluster cap when the spec sets none): every host ends."""
    return created + timedelta(seconds=host_ttl_seconds(spec, policy))


def judge_host(
    parsed: GymHostSpec | Refusal,
    references: HostReferences,
    policy: ClusterPolicy,
    created: datetime,
    now: datetime,
) -> HostVerdict:
    """The first refusal of: the spec, cluster policy, the references; then whether its lifetime is over."""
    if isinstance(parsed, Refusal):
        return HostVerdict(spec=None, refusal=parsed)
    refusal = admit_gymhost(parsed, policy) or refused_references(
        parsed, references.secrets, references.claims, policy
    )
    if refusal is not None:
        return HostVerdict(spec=parsed, refusal=refusal)
    expires_at = host_expiry(created, parsed, policy)
    return HostVerdict(spec=parsed, expires_at=expires_at, expired=now >= expires_at)
