"""A GymHost's reconcile, decided (plan/hosts.py): from one observation of the host and its children, the
writes in their order and what its conditions say. A host that may not run keeps no pod; a pod waits for its
egress policy and its RuntimeClass; a child name taken by another object is a refusal, with nothing made
after it."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.networkpolicy import egress_policy, egress_rules
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest
from gymsandbox.desired.pod import host_pod
from gymsandbox.desired.secret import lease_secret
from gymsandbox.desired.service import host_service
from gymsandbox.plan.hosts import HostWorld, plan_host, with_pod
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import load_policy
from gymsandbox.policy.egress import ResolvedTarget
from gymsandbox.policy.hosts import HostVerdict
from tests.unit.conftest import OWNER, SAMPLE_HOST, changed

POLICY = load_policy(Path(__file__).resolve().parents[2] / "examples" / "policy.yaml")
NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
SPEC = GymHostSpec.model_validate(SAMPLE_HOST)
RUNS = HostVerdict(spec=SPEC, expires_at=NOW + timedelta(hours=1))
RESOLVED = (ResolvedTarget("203.0.113.0/24:443", 443, ("203.0.113.0/24",)),)
TOKEN, OLD_TOKEN = "gs1.issued-now.signature", "gs1.issued-before.signature"


def live(manifest: Manifest, uid: str = "child-uid", **fields: Any) -> Manifest:
    """`manifest` as the API server would return it."""
    out = copy.deepcopy(manifest)
    out["metadata"]["uid"] = uid
    out.update(fields)
    return out


def foreign(manifest: Manifest) -> Manifest:
    """An object under the same name that this host does not control."""
    out = live(manifest, uid="someone-elses")
    out["metadata"]["ownerReferences"] = []
    return out


SECRET = live(lease_secret(OWNER, OLD_TOKEN))
POLICY_OBJ = live(egress_policy(OWNER, egress_rules(POLICY, RESOLVED)))
SERVICE = live(host_service(OWNER, SPEC))
CREATED = NOW - timedelta(minutes=10)
POD = live(
    host_pod(OWNER, SPEC, POLICY, "swe-gym-run-1-lease", deadline_seconds=3600), status={"phase": "Running"}
)


def world(**fields: Any) -> HostWorld:
    """A running host whose children all exist as wanted; `fields` change what was read."""
    base = HostWorld(
        OWNER,
        RUNS,
        NOW,
        CREATED,
        resolved=RESOLVED,
        lease_secret=SECRET,
        lease_token=OLD_TOKEN,
        lease_token_valid=True,
        issued_token=TOKEN,
        network_policy=POLICY_OBJ,
        service=SERVICE,
        pod=POD,
        redact=("env-secret-value",),
    )
    return replace(base, **fields)


def writes(w: HostWorld) -> list[tuple[str, str]]:
    return [(step.kind, step.write.verb) for step in plan_host(w, POLICY).writes]


CREATE_ALL = [("Secret", "create"), ("NetworkPolicy", "create"), ("Service", "create"), ("Pod", "create")]
NOTHING = {"lease_secret": None, "lease_token": None, "lease_token_valid": False, "network_policy": None,
           "service": None, "pod": None}  # fmt: skip


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        ({}, []),
        (NOTHING, CREATE_ALL),
        ({"lease_token_valid": False}, [("Secret", "replace")]),
        ({"network_policy": live(POLICY_OBJ, spec={"podSelector": {}, "policyTypes": ["Egress"]})},
         [("NetworkPolicy", "replace")]),
        ({"pod": None}, [("Pod", "create")]),
        ({"pod": live(POD, status={"phase": "Failed"})}, [("Pod", "delete")]),
        ({"resolved": None, "dns_error": "no answer", "network_policy": None}, []),
        ({"resolved": None, "dns_error": "no answer"}, []),
        ({**NOTHING, "resolved": None, "dns_error": "no answer"},
         [("Secret", "create"), ("Service", "create")]),
        ({**NOTHING, "runtime_class_missing": "RuntimeClass kata-qemu does not exist"},
         [("Secret", "create"), ("NetworkPolicy", "create"), ("Service", "create")]),
    ],
    ids=[
        "all-there", "nothing-yet", "token-not-valid", "policy-edited", "pod-gone", "pod-finished",
        "dns-failed-no-policy", "dns-failed-old-policy-kept", "dns-failed-nothing-yet", "no-runtime-class",
    ],
)  # fmt: skip
def test_children_are_written_in_order_and_only_where_they_differ(
    read: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert writes(world(**read)) == expected


def test_the_pod_waits_for_an_egress_policy_the_old_one_kept_while_dns_fails() -> None:
    waiting = plan_host(world(resolved=None, dns_error="no answer", network_policy=None, pod=None), POLICY)
    assert ("Pod", "create") not in [(s.kind, s.write.verb) for s in waiting.writes]
    assert waiting.observation.egress_error == "no answer"
    assert waiting.observation.pod is None
    kept = plan_host(world(resolved=None, dns_error="no answer", pod=None), POLICY)
    assert [(s.kind, s.write.verb) for s in kept.writes] == [("Pod", "create")]


@pytest.mark.parametrize(
    "verdict",
    [
        HostVerdict(spec=None, refusal=Refusal(Reason.INVALID_SPEC, "spec.image: required")),
        HostVerdict(spec=SPEC, refusal=Refusal(Reason.IMAGE_NOT_APPROVED, "not approved")),
    ],
    ids=["invalid", "refused"],
)
def test_a_refused_host_keeps_no_pod_and_makes_nothing(verdict: HostVerdict) -> None:
    plan = plan_host(world(verdict=verdict), POLICY)
    assert [(s.kind, s.write.verb, s.grace_seconds) for s in plan.writes] == [("Pod", "delete", 0)]
    assert plan.writes[0].write.uid == POD["metadata"]["uid"]  # only that incarnation
    assert plan.observation.refusal == verdict.refusal
    assert (plan.endpoint, plan.lease_secret_name, plan.expires_at, plan.delete_host) == (
        None,
        None,
        None,
        False,
    )


def test_a_pod_under_the_hosts_pod_name_that_it_does_not_control_is_never_ended() -> None:
    refused = HostVerdict(spec=SPEC, refusal=Refusal(Reason.IMAGE_NOT_APPROVED, "not approved"))
    assert plan_host(world(verdict=refused, pod=foreign(POD)), POLICY).writes == ()
    assert plan_host(world(verdict=refused, pod=None), POLICY).writes == ()


@pytest.mark.parametrize(("policy", "deleted"), [("Delete", True), ("Retain", False)])
def test_an_expired_host_ends_its_pod_and_is_deleted_only_when_its_expiry_policy_says_so(
    policy: str, deleted: bool
) -> None:
    spec = GymHostSpec.model_validate(changed(SAMPLE_HOST, **{"lifetime.expiryPolicy": policy}))
    expired = HostVerdict(spec=spec, expires_at=NOW - timedelta(seconds=1), expired=True)
    plan = plan_host(world(verdict=expired), POLICY)
    assert [(s.kind, s.write.verb) for s in plan.writes] == [("Pod", "delete")]
    assert plan.delete_host is deleted
    assert plan.observation.expired
    assert plan.expires_at == expired.expires_at


def test_an_allowlist_that_is_not_allowed_is_a_refusal_that_ends_the_pod() -> None:
    refusal = Refusal(Reason.EGRESS_INVALID, "10.0.0.1:443 is in a denied network")
    plan = plan_host(world(resolved=None, egress_refusal=refusal), POLICY)
    assert [(s.kind, s.write.verb) for s in plan.writes] == [("Pod", "delete")]
    assert plan.observation.refusal == refusal


@pytest.mark.parametrize(
    ("taken", "made_before"),
    [
        ("lease_secret", []),
        ("network_policy", [("Secret", "create")]),
        ("service", [("Secret", "create"), ("NetworkPolicy", "create")]),
        ("pod", [("Secret", "create"), ("NetworkPolicy", "create"), ("Service", "create")]),
    ],
)
def test_a_child_name_taken_by_another_object_is_a_refusal_and_nothing_after_it_is_made(
    taken: str, made_before: list[tuple[str, str]]
) -> None:
    existing = {"lease_secret": SECRET, "network_policy": POLICY_OBJ, "service": SERVICE, "pod": POD}
    plan = plan_host(world(**{**NOTHING, taken: foreign(existing[taken])}), POLICY)
    assert [(s.kind, s.write.verb) for s in plan.writes] == made_before
    assert plan.observation.refusal is not None
    assert plan.observation.refusal.reason == Reason.CHILD_CONFLICT
    assert plan.endpoint is None


def test_a_valid_token_is_kept_and_redacted_an_invalid_one_is_replaced_by_the_one_issued_now() -> None:
    kept = plan_host(world(), POLICY)
    assert kept.secrets == (OLD_TOKEN, "env-secret-value")
    replaced = plan_host(world(lease_token_valid=False), POLICY)
    body = replaced.writes[0].write.body
    assert body is not None
    assert body["data"] == lease_secret(OWNER, TOKEN)["data"]
    assert replaced.secrets == (TOKEN, "env-secret-value")


def test_a_pod_of_another_template_is_ended_and_its_status_still_read_from_it() -> None:
    old = copy.deepcopy(POD)
    old["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] = "an-older-template"
    plan = plan_host(world(pod=old), POLICY)
    assert [(s.kind, s.write.verb, s.grace_seconds) for s in plan.writes] == [("Pod", "delete", None)]
    assert with_pod(plan, old).pod == old


def test_the_status_fields_of_a_running_host() -> None:
    plan = plan_host(world(), POLICY)
    assert plan.lease_secret_name == "swe-gym-run-1-lease"
    assert plan.endpoint == "http://swe-gym-run-1-host.evals.svc:8080"
    assert plan.resolved == RESOLVED
    assert plan.expires_at == RUNS.expires_at
    assert with_pod(plan, POD).pod == POD


def test_a_new_host_pod_ends_by_the_latest_expiry_its_host_could_be_given() -> None:
    """Creation plus the cluster's cap (ttlSeconds may be raised up to it; a deadline can only be lowered)."""
    plan = plan_host(world(pod=None), POLICY)
    pod = plan.writes[-1].desired
    assert pod is not None
    expected = POLICY.caps.max_ttl_seconds - 600  # the host was made ten minutes before NOW
    assert pod["spec"]["activeDeadlineSeconds"] == expected
