"""EpisodeSandbox handlers.

Two loops share the work, both level-based:
- per host (`sync_host_episodes`, under the host's lock): list the host's episodes, reap the expired,
  admit waiting ones in FIFO order up to episodes.maxConcurrent, number the queue, count. Admission is
  recorded in the episode's status (admittedAt, expiresAt), so it survives restarts.
- per episode (`refresh_episode`, under the episode's lock): admission checks, then for an admitted
  episode its lease Secret (owner token), NetworkPolicy and Pod, in that order, and its conditions.
The host loop runs when an episode is created or deleted and on a short timer; the episode loop on
create, spec change (renewal), pod events and the resync timer.
"""

from __future__ import annotations

import math
from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import Egress, GymHostSpec
from gymsandbox.api.names import (
    API_VERSION,
    GROUP,
    LABEL_COMPONENT,
    LABEL_EPISODE,
    LABEL_HOST,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    VERSION,
)
from gymsandbox.desired.labels import COMPONENT_EPISODE, SANDBOX_CHILDREN
from gymsandbox.desired.names import label_value
from gymsandbox.desired.networkpolicy import egress_policy, episode_egress_rules
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest, Owner, template_hash
from gymsandbox.desired.pod import EPISODE_CONTAINER_NAME, EpisodeHost, episode_pod, episode_pod_name
from gymsandbox.handlers.common import (
    announce,
    failure_fields,
    now,
    observed,
    parse_time,
    sandbox_error,
    status_changed,
    timestamp,
)
from gymsandbox.handlers.context import ERROR_BACKOFF_SECONDS, RESYNC_SECONDS, OperatorContext
from gymsandbox.handlers.gymhost import delete_pod, ensure_network_policy, ensure_pod
from gymsandbox.handlers.kube import (
    EPISODE,
    GYMHOST,
    NETWORK_POLICY,
    POD,
    RUNTIME_CLASS,
    SECRET,
    ChildConflictError,
    Kube,
    namespace_terminating,
)
from gymsandbox.handlers.leases import ensure_lease_secret
from gymsandbox.handlers.sandboxes import end_lingering_sandboxes, stop_sandboxes
from gymsandbox.leases import Claims, Kind, Scope
from gymsandbox.metrics import METRICS, episode_phase
from gymsandbox.policy.admission import Refusal, admit_gymhost
from gymsandbox.policy.egress import EgressError, EgressTarget, ResolutionError, egress_targets, resolve
from gymsandbox.policy.episodes import EpisodeRequest, admit_episode, episode_runtime, episode_ttl_seconds
from gymsandbox.policy.queue import EpisodeSlot, plan_queue
from gymsandbox.status.conditions import merge_conditions
from gymsandbox.status.episode import EpisodeObservation, compute_episode_conditions, ready_is_stale
from gymsandbox.status.pod import sandbox_overdue

KIND: Kind = "EpisodeSandbox"
RESOURCE = "episodesandboxes"
# How often each host's episodes are reaped and admitted even without events.
REAP_SECONDS = 2.0


@dataclass(frozen=True)
class Judged:
    """An episode's spec, its host, and whether policy admits it (before concurrency)."""

    spec: EpisodeSandboxSpec | None
    host: Manifest | None
    host_spec: GymHostSpec | None
    refusal: Refusal | None


def judge(ctx: OperatorContext, episode: Mapping[str, Any], host: Manifest | None) -> Judged:
    try:
        spec = EpisodeSandboxSpec.model_validate(episode.get("spec") or {})
    except ValidationError as e:
        return Judged(None, host, None, Refusal(Reason.INVALID_SPEC, validation_message(e)))
    host_name = spec.host_ref.name
    if host is None or host["metadata"].get("deletionTimestamp"):
        why = "does not exist" if host is None else "is being deleted"
        return Judged(spec, host, None, Refusal(Reason.HOST_NOT_FOUND, f"GymHost {host_name} {why}"))
    try:
        host_spec = GymHostSpec.model_validate(host.get("spec") or {})
    except ValidationError:
        return Judged(
            spec, host, None, Refusal(Reason.HOST_NOT_READY, f"GymHost {host_name} has an invalid spec")
        )
    host_refusal = admit_gymhost(host_spec, ctx.policy)
    if host_refusal:
        return Judged(
            spec,
            host,
            host_spec,
            Refusal(Reason.HOST_NOT_READY, f"GymHost {host_name} is refused: {host_refusal.message}"),
        )
    return Judged(spec, host, host_spec, admit_episode(EpisodeRequest(spec, host_spec, ctx.policy)))


def effective_ttl(spec: EpisodeSandboxSpec, host: GymHostSpec, ctx: OperatorContext) -> int:
    """The TTL enforced: asked (or the host's default), never past the host's or the cluster's cap."""
    return min(episode_ttl_seconds(spec, host), longest_ttl(host, ctx))


def longest_ttl(host: GymHostSpec, ctx: OperatorContext) -> int:
    """The furthest any renewal can move an episode's expiry, from its admission."""
    return min(host.episodes.max_ttl_seconds, ctx.policy.caps.max_ttl_seconds)


def pod_deadline_seconds(
    admitted_at: datetime, host: GymHostSpec, ctx: OperatorContext, moment: datetime
) -> int:
    """activeDeadlineSeconds for a sandbox pod made at `moment`: it ends by the latest expiry a renewal could
    give the episode (the kubelet counts from the pod's start and the value can only be lowered later), so
    no pod outlives its episode's cap even when the operator is gone."""
    latest = admitted_at + timedelta(seconds=longest_ttl(host, ctx))
    return max(1, math.ceil((latest - moment).total_seconds()))


def belongs_to(episode: Mapping[str, Any], host_uid: str) -> bool:
    """Listed by hostRef.name; skip leftovers owned by an earlier incarnation of a same-named host."""
    refs = [r for r in episode["metadata"].get("ownerReferences") or [] if r.get("kind") == "GymHost"]
    return not refs or any(r.get("uid") == host_uid for r in refs)


def slot(ctx: OperatorContext, episode: Mapping[str, Any], judged: Judged) -> EpisodeSlot:
    meta, status = episode["metadata"], episode.get("status") or {}
    created = parse_time(meta["creationTimestamp"])
    assert created is not None  # the API server always sets it
    admitted_at = parse_time(status.get("admittedAt"))
    spec, host_spec = judged.spec, judged.host_spec
    expires_at = None
    if admitted_at and spec and host_spec:
        expires_at = admitted_at + timedelta(seconds=effective_ttl(spec, host_spec, ctx))
    deadline = None
    if spec and spec.admission_timeout_seconds:
        deadline = created + timedelta(seconds=spec.admission_timeout_seconds)
    return EpisodeSlot(
        name=meta["name"],
        created=created,
        admitted=admitted_at is not None,
        closing=bool(meta.get("deletionTimestamp")),
        admissible=judged.refusal is None,
        expires_at=expires_at,
        wait_deadline=deadline,
    )


def sync_host_episodes(
    ctx: OperatorContext, host: Manifest, moment: datetime, *, sweep: bool = False
) -> list[str]:
    """Reap, admit in FIFO order, number the queue and count, for one host. Returns the episodes to refresh
    (admitted, renewed or timed out just now).

    Sandbox pods running without an open episode hold slots (and are ended). They are looked for on `sweep`
    (an episode deleted, a resync), while an episode is closing, and until the last one seen is gone."""
    meta = host["metadata"]
    try:
        host_spec = GymHostSpec.model_validate(host.get("spec") or {})
    except ValidationError:
        return []
    kube, namespace = ctx.kube, meta["namespace"]
    with ctx.locks(f"episodes/{meta['uid']}"):
        episodes = [
            e
            for e in kube.list(EPISODE, namespace, fields=f"spec.hostRef.name={meta['name']}")
            if belongs_to(e, meta["uid"])
        ]
        by_name = {e["metadata"]["name"]: e for e in episodes}
        slots = {name: slot(ctx, e, judge(ctx, e, host)) for name, e in by_name.items()}
        open_labels = {label_value(name) for name, s in slots.items() if not s.closing}
        if sweep or len(open_labels) < len(slots) or ctx.lingering.get(meta["uid"]):
            ctx.lingering[meta["uid"]] = end_lingering_sandboxes(kube, namespace, meta["name"], open_labels)
        plan = plan_queue(
            list(slots.values()),
            host_spec.episodes.max_concurrent,
            moment,
            lingering=ctx.lingering.get(meta["uid"], 0),
        )
        reaped = []
        for name in plan.expired:
            # Only this exact state: a renewal that landed since the listing wins over the reaper.
            if kube.delete(
                EPISODE, namespace, name, resource_version=by_name[name]["metadata"]["resourceVersion"]
            ):
                reaped.append(name)
                expired_at = slots[name].expires_at or moment
                METRICS.reaped(RESOURCE, "expired", (datetime.now(UTC) - expired_at).total_seconds())
        stop_sandboxes(kube, namespace, reaped)
        touched = list(plan.timed_out)
        for name in plan.admit:
            # Its clock starts at creation even when this tick comes before its create handler (a backlog).
            METRICS.created(by_name[name]["metadata"]["uid"], by_name[name]["metadata"]["creationTimestamp"])
            spec = EpisodeSandboxSpec.model_validate(by_name[name]["spec"])
            expires = moment + timedelta(seconds=effective_ttl(spec, host_spec, ctx))
            _patch_status(
                kube,
                namespace,
                name,
                {"admittedAt": timestamp(moment), "expiresAt": timestamp(expires), "queuePosition": None},
            )
            waited = (by_name[name].get("status") or {}).get("queuePosition") is not None
            METRICS.admitted(by_name[name]["metadata"]["uid"], waited=waited)
            touched.append(name)
        for name, position in plan.positions.items():
            if (by_name[name].get("status") or {}).get("queuePosition") != position:
                _patch_status(kube, namespace, name, {"queuePosition": position})
        for name, episode_slot in slots.items():
            # A renewal (a new ttlSeconds) moves expiresAt of an admitted episode.
            stored = parse_time((by_name[name].get("status") or {}).get("expiresAt"))
            if (
                episode_slot.admitted
                and episode_slot.expires_at
                and stored != episode_slot.expires_at
                and name not in plan.expired
            ):
                _patch_status(kube, namespace, name, {"expiresAt": timestamp(episode_slot.expires_at)})
                touched.append(name)
        METRICS.episodes.set(
            meta["uid"],
            namespace,
            Tally(episode_phase(e) for e in episodes if e["metadata"]["name"] not in plan.expired),
        )
        counts = {"active": plan.active, "queued": plan.queued}
        if (host.get("status") or {}).get("episodes") != counts:
            _patch_status(kube, namespace, meta["name"], {"episodes": counts}, kind=GYMHOST)
    return touched


def _patch_status(
    kube: Kube, namespace: str, name: str, status: Mapping[str, Any], kind: Any = EPISODE
) -> None:
    try:
        kube.patch_status(kind, namespace, name, status)
    except ApiException as e:
        if e.status != 404:  # deleted meanwhile
            raise


def adopt_by_host(kube: Kube, episode: Mapping[str, Any], host: Manifest) -> None:
    """Make the host the episode's controller, so deleting the host removes its episodes."""
    meta = episode["metadata"]
    refs = list(meta.get("ownerReferences") or [])
    if any(r.get("uid") == host["metadata"]["uid"] for r in refs):
        return
    refs = [r for r in refs if not r.get("controller")]
    refs.append(
        {
            "apiVersion": API_VERSION,
            "kind": "GymHost",
            "name": host["metadata"]["name"],
            "uid": host["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    )
    kube.patch(EPISODE, meta["namespace"], meta["name"], {"metadata": {"ownerReferences": refs}})


@dataclass(frozen=True)
class EpisodeChildren:
    lease_secret_name: str | None = None
    token: str | None = None


def observe_episode(
    ctx: OperatorContext, episode: Mapping[str, Any], moment: datetime
) -> tuple[EpisodeObservation, EpisodeChildren]:
    """Admission, then (once admitted) the children in order; a taken child name is a refusal."""
    try:
        return _observe_episode(ctx, episode, moment)
    except ChildConflictError as e:
        return EpisodeObservation(refusal=Refusal(Reason.CHILD_CONFLICT, str(e))), EpisodeChildren()


def _observe_episode(
    ctx: OperatorContext, episode: Mapping[str, Any], moment: datetime
) -> tuple[EpisodeObservation, EpisodeChildren]:
    kube, meta, status = ctx.kube, episode["metadata"], episode.get("status") or {}
    owner = Owner(KIND, meta["name"], meta["namespace"], meta["uid"])
    host_name = ((episode.get("spec") or {}).get("hostRef") or {}).get("name")
    host = kube.get(GYMHOST, owner.namespace, host_name) if isinstance(host_name, str) else None
    judged = judge(ctx, episode, host)
    admitted_at = parse_time(status.get("admittedAt"))
    if judged.host is not None and judged.host_spec is not None:
        adopt_by_host(kube, episode, judged.host)
    if judged.refusal and not (admitted_at and judged.refusal.reason == Reason.TTL_OVER_CAP):
        delete_pod(kube, owner, episode_pod_name(owner))
        return EpisodeObservation(refusal=judged.refusal), EpisodeChildren()
    spec, host_spec = judged.spec, judged.host_spec
    assert spec is not None
    assert host_spec is not None
    if admitted_at is None:
        created = parse_time(meta["creationTimestamp"])
        timed_out = bool(
            spec.admission_timeout_seconds
            and created
            and moment >= created + timedelta(seconds=spec.admission_timeout_seconds)
        )
        return EpisodeObservation(
            timed_out=timed_out, queue_position=status.get("queuePosition")
        ), EpisodeChildren()
    expires_at = admitted_at + timedelta(seconds=effective_ttl(spec, host_spec, ctx))
    if moment >= expires_at:
        delete_pod(kube, owner, episode_pod_name(owner))
        return EpisodeObservation(admitted=True, expired=True), EpisodeChildren()
    claims = Claims(
        kind=KIND,
        namespace=owner.namespace,
        name=owner.name,
        uid=owner.uid,
        scope=Scope.OWNER,
        rollout_id=spec.rollout_id,
        expires_at=int(expires_at.timestamp()),
    )
    secret_name, token = ensure_lease_secret(kube, owner, ctx.signing_key, claims, int(moment.timestamp()))
    children = EpisodeChildren(secret_name, token)
    try:
        resolved = resolve(
            egress_targets_of(spec),
            ctx.policy.egress.static_hosts,
            ctx.resolver,
            allowed_private=ctx.policy.egress.allowed_private_networks,
            denied=ctx.policy.egress.denied_networks,
        )
    except (ResolutionError, EgressError) as e:
        refusal = Refusal(
            Reason.EGRESS_INVALID if isinstance(e, EgressError) else Reason.DNS_RESOLUTION_FAILED, str(e)
        )
        return EpisodeObservation(refusal=refusal), children
    ensure_network_policy(kube, owner, egress_policy(owner, episode_egress_rules(ctx.policy, resolved)))
    profile = ctx.policy.runtime_profiles[episode_runtime(spec, host_spec)]
    if kube.get(RUNTIME_CLASS, None, profile.runtime_class_name) is None:
        missing = f"RuntimeClass {profile.runtime_class_name} does not exist; no pod is created"
        return EpisodeObservation(admitted=True, runtime_class_missing=missing), children
    deadline = pod_deadline_seconds(admitted_at, host_spec, ctx, moment)
    assert judged.host is not None
    runs_for = EpisodeHost(judged.host["metadata"]["uid"], host_spec)
    pod = ensure_pod(kube, owner, episode_pod(owner, spec, runs_for, profile, deadline))
    return EpisodeObservation(
        admitted=True, pod=pod, sandbox_error=sandbox_error(kube, pod, moment)
    ), children


def egress_targets_of(spec: EpisodeSandboxSpec) -> list[EgressTarget]:
    return egress_targets(Egress(allow=list(spec.egress.allow)))


def episode_status(ctx: OperatorContext, episode: Mapping[str, Any], moment: datetime) -> dict[str, Any]:
    """Conditions and child fields. Admission fields (admittedAt, expiresAt, queuePosition) belong to the
    host loop and are never written here."""
    meta, previous = episode["metadata"], episode.get("status") or {}
    observation, children = observe_episode(ctx, episode, moment)
    verdict = compute_episode_conditions(observation)
    generation = int(meta.get("generation") or 0)
    announce(episode, previous, verdict.conditions, verdict.failure)
    pod = observation.pod or {}
    return {
        "observedGeneration": generation,
        "conditions": merge_conditions(
            previous.get("conditions") or [], verdict.conditions, generation, moment
        ),
        "podName": (pod.get("metadata") or {}).get("name"),
        "podIP": (pod.get("status") or {}).get("podIP"),
        "leaseSecretName": children.lease_secret_name,
        "failure": failure_fields(
            ctx.kube,
            verdict.failure,
            observation.pod,
            EPISODE_CONTAINER_NAME,
            (children.token,) if children.token else (),
        ),
    }


def refresh_episode(ctx: OperatorContext, namespace: str, name: str) -> None:
    """Read the episode afresh (admission may have just changed it) and reconcile it."""
    episode = ctx.kube.get(EPISODE, namespace, name)
    if episode is None or episode["metadata"].get("deletionTimestamp"):
        return
    with ctx.locks(episode["metadata"]["uid"]):
        try:
            status = episode_status(ctx, episode, now())
            if status_changed(episode.get("status") or {}, status):
                _patch_status(ctx.kube, namespace, name, status)
        except ApiException as e:
            if e.status != 404 and not namespace_terminating(e):
                raise  # else deleted meanwhile (the episode, or a child: the drift pass sees what is left)


def episodes_needing_repair(ctx: OperatorContext, namespace: str, host_name: str, host_uid: str) -> list[str]:
    """Admitted episodes whose Secret, NetworkPolicy or Pod is missing, or whose NetworkPolicy was edited, or
    whose pod still waits for its sandbox (the kubelet's reason is in an event, which no watch here sees), or
    whose stored Ready no longer matches its pod (a pod event was lost): three label-selected lists per host
    instead of a full reconcile of every episode. This pass is what makes status level-triggered; the pod
    events only make it sooner."""
    kube = ctx.kube
    episodes = [
        e
        for e in kube.list(EPISODE, namespace, fields=f"spec.hostRef.name={host_name}")
        if belongs_to(e, host_uid)
        and (e.get("status") or {}).get("admittedAt")
        and not e["metadata"].get("deletionTimestamp")
    ]
    moment = now()
    present: list[set[str]] = []
    pods: dict[str, Manifest] = {}
    for kind in (SECRET, NETWORK_POLICY, POD):
        children = kube.list(kind, namespace, labels=SANDBOX_CHILDREN)
        end_orphans(kube, kind, namespace, children)
        if kind is POD:
            pods = {(c["metadata"].get("labels") or {}).get(LABEL_EPISODE, ""): c for c in children}
        present.append(
            {
                (c["metadata"].get("labels") or {}).get(LABEL_EPISODE, "")
                for c in children
                if not (kind is NETWORK_POLICY and edited(c))
                and not (kind is POD and sandbox_overdue(c, moment))
            }
        )

    def needs_repair(episode: Manifest) -> bool:
        label = label_value(episode["metadata"]["name"])
        if any(label not in names for names in present):
            return True
        return ready_is_stale(episode.get("status") or {}, pods[label])

    return [e["metadata"]["name"] for e in episodes if needs_repair(e)]


def end_orphans(kube: Kube, kind: Any, namespace: str, children: list[Manifest]) -> None:
    """Delete episode children that no episode owns: the garbage collector strips the owner reference when an
    episode is deleted with `--cascade=orphan`, and would never remove them after that."""
    for child in children:
        refs = child["metadata"].get("ownerReferences") or []
        if not any(r.get("kind") == KIND for r in refs) and not child["metadata"].get("deletionTimestamp"):
            kube.delete(kind, namespace, child["metadata"]["name"], uid=child["metadata"]["uid"])


def edited(network_policy: Mapping[str, Any]) -> bool:
    """The live spec no longer matches the digest it was created with."""
    recorded = (network_policy["metadata"].get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)
    return recorded != template_hash(network_policy.get("spec"))


def sync_and_refresh(ctx: OperatorContext, namespace: str, host_name: str, *, sweep: bool = False) -> None:
    host = ctx.kube.get(GYMHOST, namespace, host_name)
    if host is None or host["metadata"].get("deletionTimestamp"):
        return
    for name in sync_host_episodes(ctx, host, now(), sweep=sweep):
        refresh_episode(ctx, namespace, name)


@kopf.on.resume(GROUP, VERSION, "episodesandboxes", backoff=ERROR_BACKOFF_SECONDS)
@kopf.on.create(GROUP, VERSION, "episodesandboxes", backoff=ERROR_BACKOFF_SECONDS)
@kopf.on.update(GROUP, VERSION, "episodesandboxes", field="spec", backoff=ERROR_BACKOFF_SECONDS)
@observed("episode_reconcile")
def reconcile_episode(body: kopf.Body, memo: kopf.Memo, reason: str, **_: Any) -> None:
    ctx: OperatorContext = memo.context
    if reason == "create":
        METRICS.created(str(body.metadata.uid), str(body.metadata.creation_timestamp))
    host_name = (body.spec.get("hostRef") or {}).get("name")
    if isinstance(host_name, str):
        sync_and_refresh(ctx, str(body.metadata.namespace), host_name)
    refresh_episode(ctx, str(body.metadata.namespace), str(body.metadata.name))


@kopf.timer(GROUP, VERSION, "gymhosts", interval=REAP_SECONDS, backoff=ERROR_BACKOFF_SECONDS)
@observed("episodes_tick")
def episodes_tick(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Reaping, admission and drift repair on a clock: expiries happen without events, and so does a
    restart's backlog. (Episodes get no timer of their own: kopf would put a finalizer on each, and a
    deleted episode would then wait for the operator.)"""
    ctx: OperatorContext = memo.context
    namespace = str(body.metadata.namespace)
    sweep = ctx.due(f"sweep/{body.metadata.uid}", RESYNC_SECONDS)
    for name in sync_host_episodes(ctx, dict(body), now(), sweep=sweep):
        refresh_episode(ctx, namespace, name)
    if ctx.due(f"drift/{body.metadata.uid}", RESYNC_SECONDS):
        for name in episodes_needing_repair(ctx, namespace, str(body.metadata.name), str(body.metadata.uid)):
            refresh_episode(ctx, namespace, name)


@kopf.on.event(GROUP, VERSION, "episodesandboxes")
@observed("episode_event")
def episode_event(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    """A deleted episode frees its slot once its pod is gone: end the pod and admit the next one now rather
    than at the next tick."""
    ctx: OperatorContext = memo.context
    if type != "DELETED":
        return
    ctx.locks.forget(str(body.metadata.uid))
    METRICS.forget(str(body.metadata.uid))
    host_name = (body.spec.get("hostRef") or {}).get("name")
    if isinstance(host_name, str):
        sync_and_refresh(ctx, str(body.metadata.namespace), host_name, sweep=True)


@kopf.on.event("v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_EPISODE})
@observed("episode_pod_changed")
def episode_pod_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext = memo.context
    owner_ref = next((r for r in body.metadata.get("ownerReferences") or [] if r.get("kind") == KIND), None)
    if owner_ref is not None and type is not None:
        refresh_episode(ctx, str(body.metadata.namespace), owner_ref["name"])
    host_label = (body.metadata.get("labels") or {}).get(LABEL_HOST)
    if type == "DELETED" and isinstance(host_label, str) and any(ctx.lingering.values()):
        # A pod that held a slot without an open episode is gone: the next episode may take the slot now.
        sync_and_refresh(ctx, str(body.metadata.namespace), host_label)
