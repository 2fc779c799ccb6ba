"""A GymHost's reconcile, decided: from one observation of the host and its children (`HostWorld`, gathered by
handlers/gymhost.py), the writes to make in order (`HostPlan.writes`: lease Secret, NetworkPolicy, Service,
then Pod), whether the host itself is deleted, and what its conditions are to say. Pure: every rule (a
refused or expired host keeps no pod, a pod waits for its egress policy and its RuntimeClass, a name taken by
another object is a refusal) is table-tested without a cluster (tests/unit/test_plan_hosts.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gymsandbox.api.conditions import Reason
from gymsandbox.desired.networkpolicy import egress_policy, egress_policy_name, egress_rules
from gymsandbox.desired.owner import Manifest, Owner, controlled_by
from gymsandbox.desired.pod import host_pod, host_pod_name
from gymsandbox.desired.secret import lease_secret, lease_secret_name
from gymsandbox.desired.service import host_endpoint, host_service, host_service_name
from gymsandbox.plan.children import Write, plan_lease_secret, plan_network_policy, plan_pod, plan_service
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import ResolvedTarget
from gymsandbox.policy.hosts import HostVerdict
from gymsandbox.status.gymhost import HostObservation


@dataclass(frozen=True)
class HostWorld:
    """What a host's reconcile reads, once, before it decides anything."""

    owner: Owner
    verdict: HostVerdict  # policy/hosts.py: spec, policy, the Secrets and claims it names, its lifetime
    now: datetime
    created: datetime  # the host's creationTimestamp
    # The allowlist resolved now (None: not resolved), or why it cannot be (DNS: retried) or is refused.
    resolved: tuple[ResolvedTarget, ...] | None = None
    dns_error: str | None = None
    egress_refusal: Refusal | None = None
    # The children as read (None: missing), and what the lease Secret's token is worth.
    lease_secret: Manifest | None = None
    lease_token: str | None = None  # the token it holds
    lease_token_valid: bool = False  # verifies for this very host, its scope and expiry, with the current key
    issued_token: str = ""  # a token for what the host wants now, used if the Secret needs one
    network_policy: Manifest | None = None
    service: Manifest | None = None
    pod: Manifest | None = None
    runtime_class_missing: str | None = None  # the profile's RuntimeClass, when it does not exist
    claim_problem: str | None = None  # why a PersistentVolumeClaim is unusable, if one is
    sandbox_error: str | None = None  # the kubelet's FailedCreatePodSandBox message, once the pod is overdue
    redact: tuple[str, ...] = ()  # the values of the Secrets the host's envFrom names


@dataclass(frozen=True)
class ChildWrite:
    """One write to one child: `write` as plan/children.py decides it, `desired` for a creation, and a pod
    ended because its host may not run is ended at once (`grace_seconds` 0)."""

    kind: str
    name: str
    write: Write
    desired: Manifest | None = None
    grace_seconds: int | None = None


@dataclass(frozen=True)
class HostPlan:
    """The writes in their order; `delete_host` (an expired host whose expiryPolicy is Delete, after its pod);
    the observation its conditions are computed from (its `pod` is the planned pod's, to be replaced by the
    pod as the writes leave it); and the status fields beside the conditions."""

    writes: tuple[ChildWrite, ...] = ()
    delete_host: bool = False
    observation: HostObservation = field(default_factory=HostObservation)
    pod_planned: bool = False  # the pod is the reconcile's to make or keep (its status comes from it)
    expires_at: datetime | None = None  # once the spec passed policy (a refusal or a conflict has none)
    lease_secret_name: str | None = None
    endpoint: str | None = None
    resolved: tuple[ResolvedTarget, ...] = ()
    secrets: tuple[str, ...] = ()  # kept in memory only, to redact from log tails: the token, envFrom values


def plan_host(world: HostWorld, policy: ClusterPolicy) -> HostPlan:
    owner, verdict = world.owner, world.verdict
    if verdict.refusal is not None or verdict.spec is None:
        return HostPlan(end_pod(world), observation=HostObservation(refusal=verdict.refusal))
    spec = verdict.spec
    if verdict.expired:
        delete = spec.lifetime.expiry_policy == "Delete"
        expired = HostObservation(expired=True)
        return HostPlan(end_pod(world), delete, observation=expired, expires_at=verdict.expires_at)
    if world.egress_refusal is not None:
        refused = HostObservation(refusal=world.egress_refusal)
        return HostPlan(end_pod(world), observation=refused, expires_at=verdict.expires_at)
    secret_name = lease_secret_name(owner)
    secret_write = plan_lease_secret(
        world.lease_secret, lease_secret(owner, world.issued_token), owner.uid, valid=world.lease_token_valid
    )
    token = world.lease_token if secret_write.verb == "keep" and world.lease_token else world.issued_token
    writes = [child("Secret", secret_name, secret_write)]
    if world.resolved is not None:
        desired_policy = egress_policy(owner, egress_rules(policy, world.resolved))
        writes.append(
            child(
                "NetworkPolicy",
                egress_policy_name(owner),
                plan_network_policy(world.network_policy, desired_policy, owner.uid),
            )
        )
    has_egress_policy = world.resolved is not None or world.network_policy is not None
    writes.append(
        child(
            "Service",
            host_service_name(owner),
            plan_service(world.service, host_service(owner, spec), owner.uid),
        )
    )
    pod_planned = has_egress_policy and world.runtime_class_missing is None
    if pod_planned:
        desired_pod = host_pod(
            owner, spec, policy, secret_name, deadline_seconds=host_pod_deadline(world, policy)
        )
        writes.append(child("Pod", host_pod_name(owner), plan_pod(world.pod, desired_pod, owner.uid)))
    conflict = next((w for w in writes if w.write.verb == "conflict"), None)
    if conflict is not None:  # what comes before it is made; nothing after it
        made = tuple(w for w in writes[: writes.index(conflict)] if w.write.verb != "keep")
        refusal = Refusal(Reason.CHILD_CONFLICT, conflict.write.why)
        return HostPlan(made, observation=HostObservation(refusal=refusal))
    observation = HostObservation(
        egress_error=world.dns_error,
        runtime_class_missing=world.runtime_class_missing,
        claim_problem=world.claim_problem,
        pod=world.pod if pod_planned else None,
        sandbox_error=world.sandbox_error,
    )
    return HostPlan(
        tuple(w for w in writes if w.write.verb != "keep"),
        observation=observation,
        pod_planned=pod_planned,
        expires_at=verdict.expires_at,
        lease_secret_name=secret_name,
        endpoint=host_endpoint(owner, spec),
        resolved=world.resolved or (),
        secrets=(token, *world.redact),
    )


def host_pod_deadline(world: HostWorld, policy: ClusterPolicy) -> int:
    """activeDeadlineSeconds for a host pod made now: it ends by the latest expiry its host could be given
    (creation plus the cluster's cap; ttlSeconds may be raised up to it later, and a pod's deadline can only
    be lowered), so no host pod outlives its host even when the operator is gone."""
    latest = world.created + timedelta(seconds=policy.caps.max_ttl_seconds)
    return max(1, math.ceil((latest - world.now).total_seconds()))


def child(kind: str, name: str, write: Write) -> ChildWrite:
    return ChildWrite(kind, name, write, desired=write.body if write.verb == "create" else None)


def end_pod(world: HostWorld) -> tuple[ChildWrite, ...]:
    """The host's pod, ended at once, if there is one and it is the host's (a pod of that name made by
    anyone else is left alone)."""
    pod = world.pod
    if pod is None or not controlled_by(pod, world.owner.uid):
        return ()
    write = Write("delete", uid=pod["metadata"].get("uid"), why="the host may not run")
    return (ChildWrite("Pod", host_pod_name(world.owner), write, grace_seconds=0),)


def with_pod(plan: HostPlan, pod: Manifest | None) -> HostObservation:
    """The plan's observation with the pod as the writes left it."""
    return replace(plan.observation, pod=pod) if plan.pod_planned else plan.observation
