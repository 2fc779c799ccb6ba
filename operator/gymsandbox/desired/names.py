"""Deterministic child names and label values that fit Kubernetes limits, so a restart adopts, not duplicates."""

from __future__ import annotations

import hashlib

DNS_LABEL_MAX = 63
_HASH_LEN = 8


def _short_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:_HASH_LEN]


def fit(value: str, limit: int = DNS_LABEL_MAX) -> str:
    """`value` if it fits, else a prefix plus a hash of the whole, so distinct inputs stay distinct."""
    if len(value) <= limit:
        return value
    prefix = value[: limit - _HASH_LEN - 1].rstrip("-.")
    return f"{prefix}-{_short_hash(value)}"


def child_name(owner: str, suffix: str) -> str:
    """`<owner>-<suffix>`, shortened to a DNS-1123 label (the Service name needs one, so every child gets one).

    Service names must also start with a letter; an owner starting with a digit gets a `g` prefix.
    """
    base = owner if owner[:1].isalpha() else f"g{owner}"
    room = DNS_LABEL_MAX - len(suffix) - 1
    return f"{fit(base, room)}-{suffix}"


def label_value(value: str) -> str:
    """A label value (63 characters at most) naming `value`; long names are hashed, never cut ambiguously."""
    return fit(value)
