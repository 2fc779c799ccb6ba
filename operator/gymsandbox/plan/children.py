"""Drift repair, decided: what to write so that one child (a NetworkPolicy, a Service, a Pod, a lease Secret)
matches the manifest its owner wants, from the child as read. Pure: the reconciles read the child, ask here,
and apply the answer (handlers/children.py), so every repair rule is table-tested without a cluster.

A child is the owner's only if its controller reference names the owner's uid; a name taken by anything else
is a conflict, never adopted or overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest, controlled_by

Verb = Literal["create", "keep", "replace", "delete", "label", "conflict"]


@dataclass(frozen=True)
class Write:
    """One write to a child: `create` the desired manifest; `keep` it; `replace` it with `body` (the live
    object with what drifted put back); `delete` it (its uid is `uid`: only that incarnation); `label` it with
    `body` (the labels it lacks); `conflict`: its name is taken by an object the owner does not control."""

    verb: Verb
    body: Manifest | None = None
    uid: str | None = None
    why: str = ""


def template_hash_of(child: Mapping[str, Any]) -> str | None:
    return ((child.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)


def conflict(desired: Manifest) -> Write:
    name = desired["metadata"]["name"]
    return Write(
        "conflict", why=f"{desired['kind']} {name} already exists and is not controlled by this object"
    )


def plan_network_policy(live: Manifest | None, desired: Manifest, owner_uid: str) -> Write:
    """An edited policy (its spec, or the template hash it was made with) gets the desired spec back."""
    if live is None:
        return Write("create", desired, why="missing")
    if not controlled_by(live, owner_uid):
        return conflict(desired)
    if live.get("spec") == desired["spec"] and template_hash_of(live) == template_hash_of(desired):
        return Write("keep")
    meta = {**live["metadata"], "annotations": desired["metadata"]["annotations"]}
    return Write("replace", {**live, "metadata": meta, "spec": desired["spec"]}, why="edited")


def service_ports(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ports as the operator sets them (the API server adds defaults, such as nodePort, to the rest)."""
    return [{k: p.get(k) for k in ("name", "protocol", "port", "targetPort")} for p in spec.get("ports", [])]


def plan_service(live: Manifest | None, desired: Manifest, owner_uid: str) -> Write:
    """A Service whose selector or ports drifted gets them back; what the API server filled in stays."""
    if live is None:
        return Write("create", desired, why="missing")
    if not controlled_by(live, owner_uid):
        return conflict(desired)
    want, have = desired["spec"], live.get("spec") or {}
    if have.get("selector") == want["selector"] and service_ports(have) == want["ports"]:
        return Write("keep")
    spec = {**have, "selector": want["selector"], "ports": want["ports"]}
    return Write("replace", {**live, "spec": spec}, why="edited")


def missing_labels(live: Mapping[str, Any], desired: Manifest) -> dict[str, str]:
    """The labels `desired` has that `live` lacks or holds with another value."""
    have = (live.get("metadata") or {}).get("labels") or {}
    want = desired["metadata"].get("labels") or {}
    return {key: value for key, value in want.items() if have.get(key) != value}


def plan_pod(live: Manifest | None, desired: Manifest, owner_uid: str) -> Write:
    """A pod of another template is ended (made anew by the next reconcile) unless it is ending already; a
    finished one is ended after this reading reported it (a host is meant to keep serving); a pod made before
    its selectors matched owner uids gets the labels it lacks (a Service and a NetworkPolicy select it by
    them, and a pod no NetworkPolicy selects would have no egress rule at all)."""
    if live is None:
        return Write("create", desired, why="missing")
    if not controlled_by(live, owner_uid):
        return conflict(desired)
    meta, uid = live["metadata"], live["metadata"].get("uid")
    if template_hash_of(live) != template_hash_of(desired) and not meta.get("deletionTimestamp"):
        return Write("delete", uid=uid, why="template changed")
    if (live.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return Write("delete", uid=uid, why="finished")
    labels = missing_labels(live, desired)
    if labels:
        return Write("label", labels, why="labels missing")
    return Write("keep")


def plan_lease_secret(live: Manifest | None, desired: Manifest, owner_uid: str, *, valid: bool) -> Write:
    """The lease Secret holds a token `valid` for what the owner wants (this very object, its scope, rollout
    and expiry, the current key); a missing, tampered, foreign or outdated one gets the desired token."""
    if live is None:
        return Write("create", desired, why="missing")
    if not controlled_by(live, owner_uid):
        return conflict(desired)
    if valid:
        return Write("keep")
    return Write("replace", {**live, "data": desired["data"]}, why="token not valid")
