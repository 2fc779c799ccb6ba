"""GymHost handlers. One level-based reconcile serves every trigger (a watch event, the listing at start, the
clock's resync, an event of the host's pod): gather what the host's plan depends on, plan (plan/hosts.py,
pure), apply the writes in their order (lease Secret and NetworkPolicy before the Pod), and write `status`
once if it changed. A host gets our finalizer first; a host being deleted is released, then let go.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.api.names import FINALIZER
from gymsandbox.desired.labels import host_sandbox_pods_selector
from gymsandbox.desired.networkpolicy import egress_policy_name
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.desired.pod import CONTAINER_NAME, host_pod_name
from gymsandbox.desired.secret import lease_secret_name
from gymsandbox.desired.service import host_service_name
from gymsandbox.desired.workspace import host_episodes_sub_path, host_workspace_sub_path
from gymsandbox.handlers.children import apply_write, delete_pod
from gymsandbox.handlers.common import (
    announce,
    failure_fields,
    needs_reconcile,
    now,
    parse_time,
    sandbox_error,
    status_changed,
    timestamp,
)
from gymsandbox.handlers.context import OperatorContext
from gymsandbox.handlers.leases import secret_token, token_still_valid
from gymsandbox.kube.client import (
    EPISODE,
    GYMHOST,
    NETWORK_POLICY,
    POD,
    PVC,
    RUNTIME_CLASS,
    SECRET,
    SERVICE,
    STORAGE_CLASS,
    ChildConflictError,
    Kube,
    api_refusal,
    create_or_adopt,
    namespace_terminating,
)
from gymsandbox.kube.client import KINDS as KINDS_BY_NAME
from gymsandbox.kube.informer import RetryError
from gymsandbox.kube.store import newer
from gymsandbox.leases import Claims, Kind, Scope, issue
from gymsandbox.metrics import METRICS, host_phase
from gymsandbox.plan.hosts import HostPlan, HostWorld, plan_host, with_pod
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import EgressError, ResolutionError, egress_targets, resolve
from gymsandbox.policy.hosts import HostReferences, HostVerdict, judge_host, parse_host_spec
from gymsandbox.policy.references import claim_names, secret_values
from gymsandbox.status.conditions import merge_conditions
from gymsandbox.status.gymhost import HostObservation, compute_host_conditions

KIND: Kind = "GymHost"
RESOURCE = "gymhosts"
# A host being deleted whose release the API server refuses is retried this long, then let go.
RELEASE_PATIENCE_SECONDS = 30.0
LOG = logging.getLogger("gymsandbox")


def read_references(kube: Kube, namespace: str, parsed: GymHostSpec | Refusal) -> HostReferences:
    """The Secrets and claims a host names, as they are now (none for a spec that does not parse)."""
    if isinstance(parsed, Refusal):
        return HostReferences()
    return HostReferences(
        secrets={s.secret_ref.name: kube.get(SECRET, namespace, s.secret_ref.name) for s in parsed.env_from},
        claims={name: kube.get(PVC, namespace, name) for name in claim_names(parsed)},
    )


def host_verdict(
    kube: Kube, host: Mapping[str, Any], policy: ClusterPolicy, now: datetime
) -> tuple[HostVerdict, HostReferences]:
    """Gather what the host names and judge it (policy/hosts.py): the one verdict its reconcile and its
    episodes' admission share. The references come back too: the reconcile redacts their values."""
    meta = host["metadata"]
    parsed = parse_host_spec(host.get("spec") or {})
    created = parse_time(meta["creationTimestamp"])
    assert created is not None  # the API server always sets it
    references = read_references(kube, meta["namespace"], parsed)
    return judge_host(parsed, references, policy, created, now), references


def claim_problem(kube: Kube, namespace: str, spec: GymHostSpec) -> str | None:
    """Why the pod cannot be created yet: a claim missing, or unbound and not about to bind for the pod."""
    claims = [spec.storage.claim_name] + ([spec.storage.dataset.claim_name] if spec.storage.dataset else [])
    for name in claims:
        claim = kube.get(PVC, namespace, name)
        if claim is None:
            return f"PersistentVolumeClaim {name} does not exist"
        phase = (claim.get("status") or {}).get("phase") or "Pending"
        if phase == "Pending" and binds_on_first_use(kube, claim):
            continue  # the pod is that first consumer: creating it is what binds the claim
        if phase != "Bound":
            return f"PersistentVolumeClaim {name} is {phase}, not Bound"
    return None


def binds_on_first_use(kube: Kube, claim: Mapping[str, Any]) -> bool:
    """The claim's StorageClass binds only once a pod uses it (kind's, and most clouds' defaults)."""
    class_name = (claim.get("spec") or {}).get("storageClassName")
    if not class_name:
        return False
    storage_class = kube.get(STORAGE_CLASS, None, class_name)
    return storage_class is not None and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"


def gather(ctx: OperatorContext, host: Mapping[str, Any], now: datetime) -> HostWorld:
    """Read what the host's plan depends on, once (plan/hosts.py): its verdict, its allowlist resolved now,
    its children and what they need. A host that may not run needs only its pod read."""
    kube, meta = ctx.kube, host["metadata"]
    owner = Owner(KIND, meta["name"], meta["namespace"], meta["uid"])
    verdict, references = host_verdict(kube, host, ctx.policy, now)
    pod = kube.get(POD, owner.namespace, host_pod_name(owner))
    created = parse_time(meta["creationTimestamp"])
    assert created is not None  # the API server always sets it
    world = HostWorld(owner, verdict, now, created, pod=pod)
    if verdict.spec is None or not verdict.runs or verdict.expires_at is None:
        return world
    spec = verdict.spec
    try:
        resolved = tuple(
            resolve(
                egress_targets(spec.egress),
                ctx.policy.egress.static_hosts,
                ctx.resolver,
                allowed_private=ctx.policy.egress.allowed_private_networks,
                denied=ctx.policy.egress.denied_networks,
            )
        )
        dns_error = None
    except ResolutionError as e:
        resolved, dns_error = None, str(e)
    except EgressError as e:
        return replace(world, egress_refusal=Refusal(Reason.EGRESS_INVALID, str(e)))
    claims = Claims(
        kind=KIND,
        namespace=owner.namespace,
        name=owner.name,
        uid=owner.uid,
        scope=Scope.HOST,
        expires_at=int(verdict.expires_at.timestamp()),
    )
    secret = kube.get(SECRET, owner.namespace, lease_secret_name(owner))
    token = secret_token(secret) if secret is not None else None
    profile = ctx.policy.runtime_profiles[spec.runtime]
    runtime_missing = None
    if kube.get(RUNTIME_CLASS, None, profile.runtime_class_name) is None:
        runtime_missing = (
            f"RuntimeClass {profile.runtime_class_name} (profile {spec.runtime}) does not exist;"
            " the pod is not created rather than run in another runtime"
        )
    return replace(
        world,
        resolved=resolved,
        dns_error=dns_error,
        lease_secret=secret,
        lease_token=token,
        lease_token_valid=token is not None
        and token_still_valid(token, ctx.signing_key, owner, claims, int(now.timestamp())),
        issued_token=issue(claims, ctx.signing_key),
        network_policy=kube.get(NETWORK_POLICY, owner.namespace, egress_policy_name(owner)),
        service=kube.get(SERVICE, owner.namespace, host_service_name(owner)),
        runtime_class_missing=runtime_missing,
        claim_problem=claim_problem(kube, owner.namespace, spec),
        sandbox_error=sandbox_error(kube, pod, now),
        redact=tuple(secret_values(references.secrets)),
    )


def apply(kube: Kube, owner: Owner, plan: HostPlan, pod: Manifest | None) -> Manifest | None:
    """Make the plan's writes in their order; the pod as they leave it (`pod`: as read). A child created
    meanwhile under a taken name is a ChildConflictError (create_or_adopt)."""
    for step in plan.writes:
        kind = KINDS_BY_NAME[step.kind]
        if step.write.verb == "create" and step.desired is not None:
            made, _ = create_or_adopt(kube, step.desired, owner.uid, fresh=True)
        elif step.grace_seconds is not None:
            grace = step.grace_seconds
            kube.delete(kind, owner.namespace, step.name, uid=step.write.uid, grace_seconds=grace)
            made = None
        else:
            live = pod if step.kind == "Pod" and pod is not None else {"metadata": {"name": step.name}}
            made = apply_write(kube, kind, owner, live, step.write)
        if step.kind == "Pod":
            pod = made
    return pod


def reconcile(
    ctx: OperatorContext, host: Mapping[str, Any], now: datetime
) -> tuple[HostObservation, HostPlan]:
    """Gather, plan, apply; what the conditions are computed from, and the plan (its status fields)."""
    world = gather(ctx, host, now)
    plan = plan_host(world, ctx.policy)
    try:
        pod = apply(ctx.kube, world.owner, plan, world.pod)
    except ChildConflictError as e:
        return HostObservation(refusal=Refusal(Reason.CHILD_CONFLICT, str(e))), HostPlan()
    owner = world.owner
    if plan.delete_host and ctx.kube.delete(GYMHOST, owner.namespace, owner.name, uid=owner.uid):
        lag = (datetime.now(UTC) - plan.expires_at).total_seconds() if plan.expires_at else 0.0
        METRICS.reaped(RESOURCE, "expired", lag)
    return with_pod(plan, pod), plan


def status_fields(ctx: OperatorContext, body: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The full new `status` (merge-patch form: None removes a field)."""
    meta = body["metadata"]
    previous = body.get("status") or {}
    observation, plan = reconcile(ctx, body, now)
    verdict = compute_host_conditions(observation)
    generation = int(meta.get("generation") or 0)
    conditions = merge_conditions(previous.get("conditions") or [], verdict.conditions, generation, now)
    failure = failure_fields(ctx.kube, verdict.failure, observation.pod, CONTAINER_NAME, plan.secrets)
    pod = observation.pod or {}
    announce(ctx, body, previous, verdict.conditions, verdict.failure)
    return {
        "observedGeneration": generation,
        "conditions": conditions,
        "endpoint": plan.endpoint,
        "podName": pod.get("metadata", {}).get("name"),
        "podIP": (pod.get("status") or {}).get("podIP"),
        "leaseSecretName": plan.lease_secret_name,
        "workspaceSubPath": host_workspace_sub_path(meta["uid"]),
        "episodesSubPath": host_episodes_sub_path(meta["uid"]),
        "expiresAt": timestamp(plan.expires_at),
        "resolvedEgress": [{"entry": r.entry, "addresses": list(r.cidrs)} for r in plan.resolved],
        "failure": failure,
    }


def refresh_host(ctx: OperatorContext, body: Mapping[str, Any]) -> None:
    """Reconcile one host and write its status, never two at once for the same host."""
    meta = body["metadata"]
    with ctx.locks(meta["uid"]):
        ctx.mark(f"resync/{meta['uid']}")  # the clock's next resync of it comes RESYNC_SECONDS from now
        try:
            status = status_fields(ctx, body, now())
            METRICS.hosts.set(meta["uid"], meta["namespace"], Tally([host_phase(status)]))
            if status_changed(body.get("status") or {}, status):
                ctx.hosts.put(ctx.kube.patch_status(GYMHOST, meta["namespace"], meta["name"], status))
        except ApiException as e:
            if e.status == 404 or namespace_terminating(e):
                return  # deleted meanwhile: nothing left to reconcile
            raise


@METRICS.timed("gymhost_reconcile")
def host_event(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """The host's own watch event, or its listing at start (None)."""
    handle_host(ctx, type, body)


@METRICS.timed("gymhost_resync")
def host_resync(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """The engine's clock: RESYNC_SECONDS since the host's last reconcile (drift repair, DNS again)."""
    handle_host(ctx, type, body)


@METRICS.timed("gymhost_pod_changed")
def host_pod_changed(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """An event of the host's pod: its status follows the pod now rather than at the next resync."""
    handle_host(ctx, type, body)


def handle_host(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """Everything that happens to a host, as the work queue hands it over (handlers/engine.py): a watch
    event, the listing at start (None), the clock's resync (None) or an event of its pod (None).

    A host gets our finalizer before anything is made for it; a host being deleted is released (its pods and
    episodes ended at once) and then let go. Otherwise it is reconciled when this process has not done so
    yet (a listing, a creation, a resync, a pod's event) or when its spec changed (a generation its status
    has not observed): its own status writes are neither."""
    meta = body["metadata"]
    if type == "DELETED":
        ctx.forget_host(meta["uid"])
        METRICS.forget_host(meta["uid"])
        return
    stored = ctx.hosts.get(meta["namespace"], meta["name"])
    if stored is not None and stored["metadata"].get("uid") == meta["uid"] and newer(stored, body):
        body, meta = stored, stored["metadata"]  # an event queued before this process's own last write
    if meta.get("deletionTimestamp"):
        if FINALIZER in (meta.get("finalizers") or []):
            let_go(ctx, body)
        return
    if type == "ADDED":
        METRICS.created(str(meta["uid"]), str(meta.get("creationTimestamp")))
    if FINALIZER not in (meta.get("finalizers") or []):
        held = hold(ctx, body)
        if held is None:
            return
        body = held
    if needs_reconcile(body, type):
        refresh_host(ctx, body)


def hold(ctx: OperatorContext, host: Manifest) -> Manifest | None:
    """Add our finalizer (compare-and-swap on the version read: a change meanwhile is retried with it);
    the host as written, or None when it is gone."""
    meta = host["metadata"]
    finalizers = [*(meta.get("finalizers") or []), FINALIZER]
    written = finalizers_swapped(ctx, host, finalizers)
    if written is not None:
        ctx.hosts.put(written)
    return written


def let_go(ctx: OperatorContext, host: Manifest) -> None:
    """Release a host being deleted, then remove our finalizer (compare-and-swap, as `hold`). A release the
    API server refuses (RBAC, or an authorizer still loading after a restart) is retried for
    RELEASE_PATIENCE_SECONDS from the deletion, then left to the garbage collector: a finalizer must not
    hold a host, and its namespace, forever."""
    meta = host["metadata"]
    deleted_at = parse_time(meta.get("deletionTimestamp")) or now()
    patient = (now() - deleted_at).total_seconds() < RELEASE_PATIENCE_SECONDS
    try:
        release(ctx, Owner(KIND, meta["name"], meta["namespace"], meta["uid"]))
    except ApiException as e:
        refusal = api_refusal(e)
        if refusal is None or patient:
            raise
        LOG.warning(
            "GymHost %s/%s: releasing it was refused (%s); its children are left to the garbage collector",
            meta["namespace"],
            meta["name"],
            refusal,
        )
    finalizers_swapped(ctx, host, [f for f in meta.get("finalizers") or [] if f != FINALIZER])


def finalizers_swapped(ctx: OperatorContext, host: Manifest, finalizers: list[str]) -> Manifest | None:
    """The host with `finalizers`, written only over the version read (resourceVersion makes the patch a
    compare-and-swap). None when the host is gone; RetryError when it changed since it was read."""
    meta = host["metadata"]
    change = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
    try:
        return ctx.kube.patch(GYMHOST, meta["namespace"], meta["name"], change)
    except ApiException as e:
        if e.status == 404:
            return None
        if e.status == 409:
            raise RetryError(f"GymHost {meta['name']} changed meanwhile") from None
        raise


def release(ctx: OperatorContext, owner: Owner) -> None:
    """Stop the host's pod and its episodes' sandbox pods at once, and close its episodes, including those
    not adopted yet (the garbage collector knows only owned ones, and deletes some twenty objects a
    second); the collector removes the other children."""
    delete_pod(ctx.kube, owner, host_pod_name(owner))
    ctx.kube.delete_collection(EPISODE, owner.namespace, fields=f"spec.hostRef.name={owner.name}")
    ctx.kube.delete_collection(POD, owner.namespace, labels=host_sandbox_pods_selector(owner.uid))
    ctx.forget_host(owner.uid)
    METRICS.forget_host(owner.uid)
