"""An admitted episode's children (its lease Secret, NetworkPolicy and Pod, in that order) and their repair.

What this process made or checked is remembered per episode (OperatorContext.children), so a reconcile
after the first (its pod turning Ready, say) makes no request for them; the sandbox pod is read from the
pod store. The periodic drift pass lists the children and makes the next reconcile look again at those of
an episode whose child is missing, edited or stale.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import Egress
from gymsandbox.desired.names import owned_child_name
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest, Owner
from gymsandbox.desired.pod import episode_pod_name
from gymsandbox.handlers.children import apply_write, delete_pod, ensure_network_policy
from gymsandbox.handlers.common import now, parse_time, sandbox_error
from gymsandbox.handlers.context import Made, OperatorContext
from gymsandbox.handlers.episode_queue import host_episodes, judged
from gymsandbox.handlers.leases import ensure_lease_secret, secret_token
from gymsandbox.kube.client import (
    EPISODE,
    GYMHOST,
    NETWORK_POLICY,
    POD,
    RUNTIME_CLASS,
    SECRET,
    ChildConflictError,
    Kube,
    controller_uid,
    create_or_adopt,
)
from gymsandbox.kube.client import (
    Kind as ApiKind,
)
from gymsandbox.leases import Kind
from gymsandbox.plan.children import Write
from gymsandbox.plan.episodes import (
    EpisodePlan,
    EpisodeWorld,
    lease_for,
    plan_episode,
    runs,
    template_hash,
)
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.egress import EgressError, EgressTarget, ResolutionError, egress_targets, resolve
from gymsandbox.policy.episodes import episode_runtime
from gymsandbox.status.episode import EpisodeObservation, ready_is_stale
from gymsandbox.status.pod import sandbox_overdue

KIND: Kind = "EpisodeSandbox"
# A RuntimeClass seen to exist is taken to exist for this long (a missing one is asked for every time).
RUNTIME_CLASS_SECONDS = 10.0
# Children made this recently are not judged missing by the drift pass: their watch events may be on the way
# (a burst delays them by seconds).
WATCH_LAG_SECONDS = 10.0


@dataclass(frozen=True)
class EpisodeChildren:
    lease_secret_name: str | None = None
    token: str | None = None


def current_host(ctx: OperatorContext, namespace: str, name: str) -> Manifest | None:
    """The host as its watch keeps it (listed before any episode is handled); one not there yet (its event
    still on the way) is read from the API."""
    host = ctx.hosts.get(namespace, name)
    if host is None:
        host = ctx.kube.get(GYMHOST, namespace, name)
        ctx.hosts.put(host)
    return host


def observe_episode(
    ctx: OperatorContext, episode: Mapping[str, Any], moment: datetime, *, fresh: bool = False
) -> tuple[EpisodeObservation, EpisodeChildren]:
    """Gather, plan (plan/episodes.py), apply: admission, then (once admitted) the children in order; a taken
    child name is a refusal. `fresh`: it was admitted just now by this process, so its children are made
    without looking first."""
    world = gather_episode(ctx, episode, moment)
    plan = plan_episode(world, ctx.policy)
    try:
        return apply_episode_plan(ctx, world, plan, fresh=fresh)
    except ChildConflictError as e:
        return EpisodeObservation(refusal=Refusal(Reason.CHILD_CONFLICT, str(e))), EpisodeChildren()


def gather_episode(ctx: OperatorContext, episode: Mapping[str, Any], moment: datetime) -> EpisodeWorld:
    """The episode, its host's verdict and its children as known, from the stores and this process's memory;
    for an episode that runs, its allowlist resolved and its RuntimeClass looked up."""
    meta, status = episode["metadata"], episode.get("status") or {}
    owner = owner_of(episode)
    host_name = ((episode.get("spec") or {}).get("hostRef") or {}).get("name")
    host = current_host(ctx, owner.namespace, host_name) if isinstance(host_name, str) else None
    created = parse_time(meta["creationTimestamp"])
    assert created is not None  # the API server always sets it
    made = ctx.children.get(owner.uid)
    world = EpisodeWorld(
        owner=owner,
        judged=judged(ctx, episode, host),
        now=moment,
        created=created,
        admitted_at=parse_time(status.get("admittedAt")),
        queue_position=status.get("queuePosition"),
        host_uid=host["metadata"]["uid"] if host is not None else None,
        owner_references=tuple(meta.get("ownerReferences") or ()),
        pod=ctx.pods.get(owner.namespace, episode_pod_name(owner)),
        lease_made_for=made.lease[0] if made is not None and made.lease is not None else None,
        policy_made=made.policy if made is not None else None,
    )
    if not runs(world, ctx.policy):
        return world
    spec, host_spec = world.judged.spec, world.judged.host_spec
    assert spec is not None
    assert host_spec is not None
    try:
        resolved = resolve(
            egress_targets_of(spec),
            ctx.policy.egress.static_hosts,
            ctx.resolver,
            allowed_private=ctx.policy.egress.allowed_private_networks,
            denied=ctx.policy.egress.denied_networks,
        )
    except (ResolutionError, EgressError) as e:
        reason = Reason.EGRESS_INVALID if isinstance(e, EgressError) else Reason.DNS_RESOLUTION_FAILED
        return replace(world, egress_refusal=Refusal(reason, str(e)))
    profile = ctx.policy.runtime_profiles[episode_runtime(spec, host_spec)]
    missing = None
    if not runtime_class_exists(ctx, profile.runtime_class_name):
        missing = f"RuntimeClass {profile.runtime_class_name} does not exist; no pod is created"
    return replace(world, resolved=tuple(resolved), runtime_class_missing=missing)


def apply_episode_plan(
    ctx: OperatorContext, world: EpisodeWorld, plan: EpisodePlan, *, fresh: bool
) -> tuple[EpisodeObservation, EpisodeChildren]:
    """The plan's writes in order: the host made controller, the pod ended; the lease Secret and the
    NetworkPolicy at once (neither needs the other); then the pod. What was made is remembered
    (OperatorContext.children) and goes to the stores. Returns the observation with the pod as the writes
    left it, and the children's lease Secret and token."""
    kube, owner = ctx.kube, world.owner
    if plan.adopt is not None:
        refs = {"metadata": {"ownerReferences": list(plan.adopt)}}
        ctx.episodes.put(kube.patch(EPISODE, owner.namespace, owner.name, refs))
    if plan.end_pod:
        delete_pod(kube, owner, episode_pod_name(owner), seen=ctx.pods)
    if not plan.children:
        return plan.observation, EpisodeChildren()
    made = ctx.children.setdefault(owner.uid, Made())
    lease = None
    if plan.lease is not None:
        claims, issued_at = plan.lease, int(world.now.timestamp())
        lease = ctx.alongside(
            lambda: ensure_lease_secret(kube, owner, ctx.signing_key, claims, issued_at, fresh=fresh)
        )
    try:
        if plan.network_policy is not None:
            ensure_network_policy(kube, owner, plan.network_policy, fresh=fresh)
            made.policy = template_hash(plan.network_policy)
    finally:
        if lease is not None and plan.lease is not None:
            made.lease = (lease_for(plan.lease), *lease.result())
    children = EpisodeChildren(*made.lease[1:]) if made.lease is not None else EpisodeChildren()
    if plan.pod is None:
        return plan.observation, children
    pod = apply_pod_write(ctx, owner, plan.pod, world.pod)
    observation = replace(plan.observation, pod=pod, sandbox_error=sandbox_error(kube, pod, world.now))
    return observation, children


def apply_pod_write(
    ctx: OperatorContext, owner: Owner, write: Write, live: Manifest | None
) -> Manifest | None:
    """The sandbox pod created (a name found taken by the owner's own pod is adopted), labelled, ended or
    kept (`live`: as the write was planned from); the pod as it is afterwards, which a creation or a label
    puts in the pods' store."""
    if write.verb == "create" or live is None:
        assert write.body is not None
        pod, _ = create_or_adopt(ctx.kube, write.body, owner.uid, fresh=True)
    else:
        pod = apply_write(ctx.kube, POD, owner, live, write)
        if write.verb != "label":
            return pod
    ctx.pods.put(pod)
    return pod


def runtime_class_exists(ctx: OperatorContext, name: str) -> bool:
    seen = ctx.runtime_classes.get(name)
    if seen is not None and time.monotonic() - seen < RUNTIME_CLASS_SECONDS:
        return True
    if ctx.kube.get(RUNTIME_CLASS, None, name) is None:
        ctx.runtime_classes.pop(name, None)
        return False
    ctx.runtime_classes[name] = time.monotonic()
    return True


def egress_targets_of(spec: EpisodeSandboxSpec) -> list[EgressTarget]:
    return egress_targets(Egress(allow=list(spec.egress.allow)))


def episodes_needing_repair(ctx: OperatorContext, namespace: str) -> list[str]:
    """Admitted episodes whose Secret, NetworkPolicy or Pod is missing, or whose NetworkPolicy was edited, or
    whose pod still waits for its sandbox (the kubelet's reason is in an event, which no watch here sees), or
    whose stored Ready no longer matches its pod: from the stores the children's watches keep (whatever the
    number of episodes, no request), instead of a full reconcile of every episode. This pass is what
    makes status level-triggered; the pod events only make it sooner. What was remembered of the children
    of an episode with a child missing, edited or with a changed token is forgotten (a stale Ready alone is
    written from the pod as stored: in a backlog of pod events it is common, and its children are sound)."""
    episodes = [
        e
        for host in ctx.hosts.in_namespace(namespace)
        if not host["metadata"].get("deletionTimestamp")
        for e in host_episodes(ctx, host)
        if (e.get("status") or {}).get("admittedAt") and not e["metadata"].get("deletionTimestamp")
    ]
    since = time.monotonic()
    present, pods, tokens = children_seen(ctx, namespace, now())
    # An episode reconciled meanwhile is left to that reconcile (under load, admitted and half-made is what
    # the stores then show).
    episodes = [e for e in episodes if not ctx.locks.busy_since(e["metadata"]["uid"], since)]

    def broken(episode: Manifest) -> bool:
        uid = episode["metadata"]["uid"]
        made = ctx.children.get(uid)
        if made is not None and time.monotonic() - made.since < WATCH_LAG_SECONDS:
            return False  # made just now: their watches may not have told of them yet
        if any(uid not in uids for uids in present):
            return True
        return made is not None and made.lease is not None and tokens.get(uid) != made.lease[2]

    def ready_stale(episode: Manifest) -> bool:
        """Its stored Ready disagrees with its pod as stored. With no pod stored there is nothing to compare
        (`broken` already counts a missing pod once the children are older than the watch's lag). A pair
        found in agreement is compared again only once either changes (the comparison is a pure function
        of the two): with 1,000 episodes Ready a pass took 22-40 ms of CPU, and takes 2-4 ms."""
        meta = episode["metadata"]
        pod = pods.get(meta["uid"])
        if pod is None:
            return False
        versions = (
            meta.get("resourceVersion"),
            pod["metadata"].get("uid"),
            pod["metadata"].get("resourceVersion"),
        )
        if versions[0] and versions[2] and ctx.memo.agrees(meta["uid"], "ready-agrees", versions):
            return False
        stale = ready_is_stale(episode.get("status") or {}, pod)
        ctx.memo.agreed(meta["uid"], "ready-agrees", None if stale else versions)
        return stale

    broken_uids = {e["metadata"]["uid"] for e in episodes if broken(e)}
    repair = [e for e in episodes if e["metadata"]["uid"] in broken_uids or ready_stale(e)]
    for episode in repair:
        if episode["metadata"]["uid"] in broken_uids:  # a stale Ready alone needs only the pod as stored
            ctx.children.pop(episode["metadata"]["uid"], None)
    return [e["metadata"]["name"] for e in repair]


def children_seen(
    ctx: OperatorContext, namespace: str, moment: datetime
) -> tuple[list[set[str]], dict[str, Manifest], dict[str, str | None]]:
    """The namespace's episode Secrets, NetworkPolicies and sandbox pods as their watches keep them (a gap a
    watch cannot resume is listed again: kube/informer.py), strays among them ended: for each kind, the
    uids of the episodes whose child is there and sound; the pods by episode uid; the lease tokens by episode
    uid. A child belongs to the episode its controller reference names, whatever its labels say."""
    secrets, policies, stored_pods = (
        store.in_namespace(namespace) for store in (ctx.secrets, ctx.policies, ctx.pods)
    )
    secrets, policies, stored_pods = (
        end_strays(ctx.kube, kind, namespace, children)
        for kind, children in (
            (("Secret", SECRET), secrets),
            (("NetworkPolicy", NETWORK_POLICY), policies),
            (("Pod", POD), stored_pods),
        )
    )
    tokens = {episode_uid(secret): secret_token(secret) for secret in secrets}
    pods = {episode_uid(pod): pod for pod in stored_pods}
    present = [
        set(tokens),
        {episode_uid(policy) for policy in policies if not edited(policy)},
        {uid for uid, pod in pods.items() if not sandbox_overdue(pod, moment)},
    ]
    return present, pods, tokens


def episode_uid(child: Manifest) -> str:
    """The uid of the episode that controls `child` ("" for none: an orphan, ended by end_orphans)."""
    return controller_uid(child, KIND) or ""


def owner_of(episode: Mapping[str, Any]) -> Owner:
    meta = episode["metadata"]
    return Owner(KIND, meta["name"], meta["namespace"], meta["uid"])


def stray(child: Manifest, kind: str) -> bool:
    """An episode child that no episode owns (the garbage collector strips the owner reference when an
    episode is deleted with `--cascade=orphan`, and would never remove it after that), or one under a name
    its episode does not want (made by an earlier version of the operator, before CHILD_SUFFIXES)."""
    refs = child["metadata"].get("ownerReferences") or []
    owners = [r for r in refs if r.get("kind") == KIND]
    owner = next((r for r in owners if r.get("controller")), owners[0] if owners else None)
    if owner is None:
        return True
    return bool(child["metadata"]["name"] != owned_child_name(KIND, str(owner.get("name")), kind))


def end_strays(
    kube: Kube, kind: tuple[str, ApiKind], namespace: str, children: list[Manifest]
) -> list[Manifest]:
    """Delete the strays among `children`, of `kind` (its name and where it lives), by uid: only that
    incarnation. Returns the rest."""
    kept = []
    for child in children:
        if not stray(child, kind[0]):
            kept.append(child)
        elif not child["metadata"].get("deletionTimestamp"):
            kube.delete(kind[1], namespace, child["metadata"]["name"], uid=child["metadata"]["uid"])
    return kept


def edited(network_policy: Mapping[str, Any]) -> bool:
    """The live spec (its digest, as the store keeps it) no longer matches the digest it was created with."""
    recorded = (network_policy["metadata"].get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)
    return bool(recorded != network_policy["specDigest"])
