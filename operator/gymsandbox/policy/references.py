"""Which Secrets and claims a GymHost may use (cluster policy `references`), decided from the objects as
read. A namespace user may create GymHosts but not Secrets: without this, envFrom could load any Secret of
the namespace into a host (another run's lease token included) and claimName could mount another run's data.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.api.names import LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.leases import SIGNING_KEY_SECRET
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import ClusterPolicy

MIN_REDACTED_CHARS = 4  # shorter values would blank out ordinary words of a log


def claim_names(spec: GymHostSpec) -> list[str]:
    dataset = spec.storage.dataset
    return [spec.storage.claim_name, *([dataset.claim_name] if dataset else [])]


def _lacks(labels: Mapping[str, str], selector: Mapping[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(selector.items()) if labels.get(k) != v]


def refused_references(
    spec: GymHostSpec,
    secrets: Mapping[str, Mapping[str, Any] | None],
    claims: Mapping[str, Mapping[str, Any] | None],
    policy: ClusterPolicy,
) -> Refusal | None:
    """The first Secret or claim the host may not use, as a refusal naming it and why; `secrets` and
    `claims` map each referenced name to the object as read (None: it does not exist). A missing claim is
    not refused here: the pod waits for it (PersistentVolumeClaimNotBound)."""
    for source in spec.env_from:
        name = source.secret_ref.name
        secret = secrets.get(name)
        if secret is None:
            return Refusal(Reason.SECRET_NOT_ALLOWED, f"envFrom Secret {name} does not exist")
        labels = secret["metadata"].get("labels") or {}
        if name == SIGNING_KEY_SECRET or labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
            return Refusal(Reason.SECRET_NOT_ALLOWED, f"envFrom Secret {name} is the operator's own")
        missing = _lacks(labels, policy.references.secret_selector)
        if missing:
            return Refusal(
                Reason.SECRET_NOT_ALLOWED,
                f"envFrom Secret {name} lacks the label {', '.join(missing)} that cluster policy"
                " (references.secretSelector) asks of Secrets hosts may use",
            )
    for name in claim_names(spec):
        claim = claims.get(name)
        missing = _lacks(
            (claim or {}).get("metadata", {}).get("labels") or {}, policy.references.claim_selector
        )
        if claim is not None and missing:
            return Refusal(
                Reason.CLAIM_NOT_ALLOWED,
                f"PersistentVolumeClaim {name} lacks the label {', '.join(missing)} that cluster policy"
                " (references.claimSelector) asks of claims hosts may mount",
            )
    return None


def secret_values(secrets: Mapping[str, Mapping[str, Any] | None]) -> tuple[str, ...]:
    """Every value of these Secrets long enough to redact, decoded: what a host may print."""
    values = []
    for secret in secrets.values():
        for encoded in ((secret or {}).get("data") or {}).values():
            try:
                value = base64.b64decode(str(encoded), validate=True).decode("utf-8", errors="replace")
            except (binascii.Error, ValueError):
                continue
            if len(value) >= MIN_REDACTED_CHARS:
                values.append(value)
    return tuple(values)
