"""An episode's reconcile, decided: from one observation of the episode, its host's verdict and its children
as known (`EpisodeWorld`, gathered by handlers/episode_children.py), what to write (`EpisodePlan`: the host
made its controller, its pod ended, its lease Secret and NetworkPolicy made or checked, its pod made, kept,
labelled or ended) and what its conditions are to say. Pure: every rule (a refused or expired episode keeps
no pod, a waiting one times out, a renewal issues a new token, the pod waits for its egress policy and its
RuntimeClass, a name taken by another object is a refusal) is table-tested without a cluster
(tests/unit/test_plan_episodes.py).

The lease Secret and the NetworkPolicy need nothing of each other: the apply makes them at once, both before
the pod. What this process made or checked of them is part of the observation (`lease_made_for`,
`policy_made`), so a reconcile after the first asks for neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.networkpolicy import egress_policy, episode_egress_rules
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest, Owner
from gymsandbox.desired.pod import EpisodeHost, episode_pod
from gymsandbox.leases import Claims, Scope
from gymsandbox.plan.children import Write, plan_pod
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import ResolvedTarget
from gymsandbox.policy.episodes import episode_runtime, episode_ttl_seconds
from gymsandbox.status.episode import EpisodeObservation

# What a lease token is issued for: its expiry and rollout (its id is new each time it is issued).
LeaseFor = tuple[int, str | None]


@dataclass(frozen=True)
class Judged:
    """An episode's spec, its host's spec, and whether policy admits it (before concurrency)."""

    spec: EpisodeSandboxSpec | None
    host_spec: GymHostSpec | None
    refusal: Refusal | None


def longest_ttl(host: GymHostSpec, policy: ClusterPolicy) -> int:
    """The furthest any renewal can move an episode's expiry, from its admission."""
    return min(host.episodes.max_ttl_seconds, policy.caps.max_ttl_seconds)


def effective_ttl(spec: EpisodeSandboxSpec, host: GymHostSpec, policy: ClusterPolicy) -> int:
    """The TTL enforced: asked (or the host's default), never past the host's or the cluster's cap."""
    return min(episode_ttl_seconds(spec, host), longest_ttl(host, policy))


def pod_deadline_seconds(
    admitted_at: datetime, host: GymHostSpec, policy: ClusterPolicy, moment: datetime
) -> int:
    """activeDeadlineSeconds for a sandbox pod made at `moment`: it ends by the latest expiry a renewal could
    give the episode (the kubelet counts from the pod's start and the value can only be lowered later), so
    no pod outlives its episode's cap even when the operator is gone."""
    latest = admitted_at + timedelta(seconds=longest_ttl(host, policy))
    return max(1, math.ceil((latest - moment).total_seconds()))


@dataclass(frozen=True)
class EpisodeWorld:
    """What an episode's reconcile reads, once, before it decides anything. The children's part is read only
    for an episode that runs (`runs`): its allowlist resolved, its RuntimeClass looked up."""

    owner: Owner
    judged: Judged
    now: datetime
    created: datetime
    admitted_at: datetime | None = None  # its status, or a decision of this process not yet written
    queue_position: int | None = None  # as its status holds it
    host_uid: str | None = None  # the host's uid, when the host exists
    owner_references: tuple[Mapping[str, Any], ...] = ()  # the episode's own, as read
    pod: Manifest | None = None  # its pod, as the pods' store holds it
    lease_made_for: LeaseFor | None = None  # what this process last made its lease Secret hold a token for
    policy_made: str | None = None  # the template hash of the NetworkPolicy this process last made or checked
    # Its allowlist resolved now, or why it cannot be (DNS) or may not be (policy): a refusal either way.
    resolved: tuple[ResolvedTarget, ...] = ()
    egress_refusal: Refusal | None = None
    runtime_class_missing: str | None = None  # the profile's RuntimeClass, when it does not exist


@dataclass(frozen=True)
class EpisodePlan:
    """The writes, in their order: the host made the episode's controller (`adopt`: the ownerReferences to
    write), its pod ended at once, its lease Secret holding a token for `lease` and its NetworkPolicy (both
    at once, only when not known made), then `pod` (plan/children.py's write; `create` carries the desired
    pod). `observation`: what its conditions are computed from (its pod is the pod as the writes leave it)."""

    observation: EpisodeObservation
    adopt: tuple[Mapping[str, Any], ...] | None = None
    end_pod: bool = False
    children: bool = False  # it runs: its children are made, checked or reported (plan.runs)
    lease: Claims | None = None
    network_policy: Manifest | None = None
    pod: Write | None = None


def runs(world: EpisodeWorld, policy: ClusterPolicy) -> bool:
    """Whether the episode is to have children now: admitted by policy and by its host's queue, and not
    expired. The gather reads the children's part of the world only then (DNS, the RuntimeClass)."""
    judged = world.judged
    if judged.spec is None or judged.host_spec is None or world.admitted_at is None:
        return False
    if judged.refusal is not None and judged.refusal.reason != Reason.TTL_OVER_CAP:
        return False
    return world.now < world.admitted_at + timedelta(
        seconds=effective_ttl(judged.spec, judged.host_spec, policy)
    )


def plan_episode(world: EpisodeWorld, policy: ClusterPolicy) -> EpisodePlan:
    judged = world.judged
    adopt = adoption(world) if world.host_uid is not None and judged.host_spec is not None else None
    # A renewal past the cap refuses the change, not an episode already running.
    if judged.refusal is not None and not (
        world.admitted_at is not None and judged.refusal.reason == Reason.TTL_OVER_CAP
    ):
        return EpisodePlan(EpisodeObservation(refusal=judged.refusal), adopt, end_pod=True)
    spec, host_spec = judged.spec, judged.host_spec
    assert spec is not None  # a verdict without a refusal has both
    assert host_spec is not None
    if world.admitted_at is None:
        timed_out = bool(
            spec.admission_timeout_seconds
            and world.now >= world.created + timedelta(seconds=spec.admission_timeout_seconds)
        )
        return EpisodePlan(
            EpisodeObservation(timed_out=timed_out, queue_position=world.queue_position), adopt
        )
    expires_at = world.admitted_at + timedelta(seconds=effective_ttl(spec, host_spec, policy))
    if world.now >= expires_at:
        return EpisodePlan(EpisodeObservation(admitted=True, expired=True), adopt, end_pod=True)
    return plan_children(world, policy, spec=spec, host_spec=host_spec, expires_at=expires_at, adopt=adopt)


def plan_children(
    world: EpisodeWorld,
    policy: ClusterPolicy,
    *,
    spec: EpisodeSandboxSpec,
    host_spec: GymHostSpec,
    expires_at: datetime,
    adopt: tuple[Mapping[str, Any], ...] | None,
) -> EpisodePlan:
    """A running episode's children: its lease Secret and NetworkPolicy unless known made as wanted, then
    its pod once its allowlist and its RuntimeClass allow one."""
    owner = world.owner
    assert world.admitted_at is not None
    claims = Claims(
        kind="EpisodeSandbox",
        namespace=owner.namespace,
        name=owner.name,
        uid=owner.uid,
        scope=Scope.OWNER,
        rollout_id=spec.rollout_id,
        expires_at=int(expires_at.timestamp()),
    )
    lease = None if world.lease_made_for == lease_for(claims) else claims
    if world.egress_refusal is not None:
        return EpisodePlan(
            EpisodeObservation(refusal=world.egress_refusal), adopt, children=True, lease=lease
        )
    desired_policy = egress_policy(owner, episode_egress_rules(policy, world.resolved))
    network_policy = None if world.policy_made == template_hash(desired_policy) else desired_policy
    if world.runtime_class_missing is not None:
        missing = EpisodeObservation(admitted=True, runtime_class_missing=world.runtime_class_missing)
        return EpisodePlan(missing, adopt, children=True, lease=lease, network_policy=network_policy)
    assert world.host_uid is not None  # a verdict without a refusal has a host
    profile = policy.runtime_profiles[episode_runtime(spec, host_spec)]
    deadline = pod_deadline_seconds(world.admitted_at, host_spec, policy, world.now)
    desired = episode_pod(owner, spec, EpisodeHost(world.host_uid, host_spec), profile, deadline)
    live = world.pod
    pod = Write("create", desired, why="missing") if live is None else plan_pod(live, desired, owner.uid)
    if pod.verb == "conflict":  # its Secret and NetworkPolicy come before it, and are made
        refused = EpisodeObservation(refusal=Refusal(Reason.CHILD_CONFLICT, pod.why))
        return EpisodePlan(refused, adopt, children=True, lease=lease, network_policy=network_policy)
    return EpisodePlan(
        EpisodeObservation(admitted=True, pod=world.pod),
        adopt,
        children=True,
        lease=lease,
        network_policy=network_policy,
        pod=pod,
    )


def lease_for(claims: Claims) -> LeaseFor:
    return (claims.expires_at, claims.rollout_id)


def template_hash(manifest: Manifest) -> str:
    return str(manifest["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])


def adoption(world: EpisodeWorld) -> tuple[Mapping[str, Any], ...] | None:
    """The ownerReferences that make the host the episode's controller (so deleting the host removes its
    episodes), replacing any other controller; None when the host is already among them. The broker sets
    it at creation; an episode applied directly gets it here, in one more write."""
    assert world.host_uid is not None
    if any(r.get("uid") == world.host_uid for r in world.owner_references):
        return None
    kept = [r for r in world.owner_references if not r.get("controller")]
    host_name = world.judged.spec.host_ref.name if world.judged.spec is not None else ""
    host = Owner("GymHost", host_name, world.owner.namespace, world.host_uid)
    return (*kept, host.reference())
