"""Deterministic child names and label values within Kubernetes limits: a restart adopts, never duplicates."""

from __future__ import annotations

import hashlib

DNS_LABEL_MAX = 63
_HASH_LEN = 8

# The suffix of each child's name, by owner kind and child kind. A GymHost and an EpisodeSandbox of one name
# (or of names such as `a` and `a-sandbox`) in one namespace never claim the same child name: of two owner
# kinds, no suffix for one child kind is the other's, or ends with "-" and the other's (an owner named `a-x`
# and one named `a` would meet at `a-x-<suffix>`). tests/unit/test_desired_names.py checks the table.
CHILD_SUFFIXES: dict[str, dict[str, str]] = {
    "GymHost": {"Secret": "lease", "NetworkPolicy": "egress", "Pod": "host", "Service": "host"},
    "EpisodeSandbox": {"Secret": "sandbox-token", "NetworkPolicy": "sandbox-net", "Pod": "sandbox"},
}


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


def owned_child_name(owner_kind: str, owner_name: str, child_kind: str) -> str:
    """The name of an owner's child of `child_kind` (CHILD_SUFFIXES)."""
    return child_name(owner_name, CHILD_SUFFIXES[owner_kind][child_kind])
