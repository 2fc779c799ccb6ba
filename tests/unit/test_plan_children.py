"""Drift repair (plan/children.py): what to write so that a child matches what its owner wants, from the child
as read. A child is the owner's only by its controller reference; anything else under its name conflicts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION
from gymsandbox.plan.children import (
    Write,
    plan_lease_secret,
    plan_network_policy,
    plan_pod,
    plan_service,
)

OWNER = "uid-owner"


def child(kind: str, *, owner: str = OWNER, hash_: str = "h1", **fields: Any) -> dict[str, Any]:
    meta = {
        "name": "c",
        "namespace": "ns",
        "uid": "uid-child",
        "labels": {"gymsandbox.dev/episode-uid": OWNER},
        "annotations": {TEMPLATE_HASH_ANNOTATION: hash_},
        "ownerReferences": [{"uid": owner, "controller": True}],
    }
    return {"kind": kind, "metadata": meta, **fields}


def edited(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`obj` with the field at `path` (dotted) set, or removed (None)."""
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    target = out
    for key in parents:
        target = target[key]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return out


def of_template(obj: dict[str, Any], template_hash: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] = template_hash
    return out


POLICY = child("NetworkPolicy", spec={"podSelector": {"matchLabels": {"a": "b"}}, "policyTypes": ["Egress"]})
SERVICE = child(
    "Service",
    spec={
        "selector": {"a": "b"},
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
    },
)
POD = child("Pod", spec={"containers": []}, status={"phase": "Running"})
SECRET = child("Secret", data={"token": "bmV3"})


@pytest.mark.parametrize(
    ("live", "verb"),
    [
        (None, "create"),
        (POLICY, "keep"),
        (
            edited(POLICY, "metadata.ownerReferences", [{"uid": "someone-else", "controller": True}]),
            "conflict",
        ),
        (edited(POLICY, "metadata.ownerReferences", [{"uid": OWNER, "controller": False}]), "conflict"),
        (edited(POLICY, "spec.policyTypes", ["Ingress"]), "replace"),
        (of_template(POLICY, "h0"), "replace"),
    ],
    ids=["missing", "same", "foreign", "not-controller", "spec-edited", "template-of-another"],
)
def test_a_network_policy_is_made_kept_or_given_its_spec_back(live: dict[str, Any] | None, verb: str) -> None:
    write = plan_network_policy(live, POLICY, OWNER)
    assert write.verb == verb
    if verb == "replace":
        assert write.body is not None
        assert write.body["spec"] == POLICY["spec"]
        assert write.body["metadata"]["annotations"] == POLICY["metadata"]["annotations"]
        assert write.body["metadata"]["uid"] == "uid-child"  # the live object, put back: not a new one
    if verb == "conflict":
        assert write.why == "NetworkPolicy c already exists and is not controlled by this object"


def test_a_service_keeps_what_the_api_server_filled_in_and_gets_its_selector_and_ports_back() -> None:
    filled = edited(SERVICE, "spec.clusterIP", "10.0.0.7")
    filled["spec"]["ports"][0]["nodePort"] = 30001
    assert plan_service(filled, SERVICE, OWNER) == Write("keep")
    hijacked = edited(filled, "spec.selector", {"app": "attacker"})
    write = plan_service(hijacked, SERVICE, OWNER)
    assert write.verb == "replace"
    assert write.body is not None
    assert write.body["spec"]["selector"] == {"a": "b"}
    assert write.body["spec"]["clusterIP"] == "10.0.0.7"
    assert plan_service(edited(filled, "spec.ports", []), SERVICE, OWNER).verb == "replace"
    assert plan_service(None, SERVICE, OWNER) == Write("create", SERVICE, why="missing")


@pytest.mark.parametrize(
    ("live", "verb"),
    [
        (None, "create"),
        (POD, "keep"),
        (edited(POD, "metadata.ownerReferences", []), "conflict"),
        (of_template(POD, "h0"), "delete"),
        (
            edited(
                of_template(POD, "h0"),
                "metadata.deletionTimestamp",
                "t",
            ),
            "keep",
        ),
        (edited(POD, "status.phase", "Failed"), "delete"),
        (edited(POD, "status.phase", "Succeeded"), "delete"),
        (edited(POD, "metadata.labels", {}), "label"),
    ],
    ids=[
        "missing",
        "same",
        "foreign",
        "template-changed",
        "already-ending",
        "failed",
        "succeeded",
        "unlabelled",
    ],
)
def test_a_pod_is_made_kept_ended_or_labelled(live: dict[str, Any] | None, verb: str) -> None:
    write = plan_pod(live, POD, OWNER)
    assert write.verb == verb
    if verb == "delete":
        assert write.uid == "uid-child"  # only that incarnation
    if verb == "label":
        assert write.body == {"gymsandbox.dev/episode-uid": OWNER}


def test_a_pod_gets_only_the_labels_it_lacks_or_holds_with_another_value() -> None:
    live = edited(POD, "metadata.labels", {"gymsandbox.dev/episode-uid": "other", "team": "rl"})
    desired = edited(POD, "metadata.labels", {"gymsandbox.dev/episode-uid": OWNER, "app": "x"})
    assert plan_pod(live, desired, OWNER).body == {"gymsandbox.dev/episode-uid": OWNER, "app": "x"}


@pytest.mark.parametrize(
    ("live", "valid", "verb"),
    [
        (None, False, "create"),
        (SECRET, True, "keep"),
        (edited(SECRET, "data", {"token": "b2xk"}), False, "replace"),
        (edited(SECRET, "metadata.ownerReferences", []), True, "conflict"),
    ],
    ids=["missing", "valid", "tampered-or-outdated", "foreign"],
)
def test_a_lease_secret_holds_a_valid_token_or_gets_the_new_one(
    live: dict[str, Any] | None, valid: bool, verb: str
) -> None:
    write = plan_lease_secret(live, SECRET, OWNER, valid=valid)
    assert write.verb == verb
    if verb == "replace":
        assert write.body is not None
        assert write.body["data"] == SECRET["data"]
        assert write.body["metadata"]["uid"] == "uid-child"
