"""Deterministic child names and label values within Kubernetes limits: a restart adopts, never duplicates."""

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
    """`<owner>-<suffix>`, shortened to a DNS-1123 label (Services need one, so every child gets one).

    Service names must also start with a letter and cannot hold dots. An owner that is not such a label
    already (it starts with a digit, or it is a DNS subdomain such as `llama-3.1-eval`) gets a `g` prefix
    and dashes for dots, plus a hash of the original so that `1abc` and `g1abc`, or `a.b` and `a-b`, do not
    share children.
    """
    room = DNS_LABEL_MAX - len(suffix) - 1
    if owner[:1].isalpha() and "." not in owner:
        return f"{fit(owner, room)}-{suffix}"
    base = (owner if owner[:1].isalpha() else f"g{owner}").replace(".", "-")
    prefix = base[: room - _HASH_LEN - 1].rstrip("-")
    return f"{prefix}-{_short_hash(owner)}-{suffix}"


def label_value(value: str) -> str:
    """A label value (63 characters at most) naming `value`; long names are hashed, never cut ambiguously."""
    return fit(value)
