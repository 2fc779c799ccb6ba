"""GymHost handlers: one level-based reconcile serves create, resume, spec updates, the drift timer and
pod events. It parses the spec, applies policy, creates or repairs the children in order (lease Secret
and NetworkPolicy before the Pod), observes them and writes only `status`.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.api.names import FINALIZER, GROUP, VERSION
from gymsandbox.desired.labels import host_sandbox_pods_selector
from gymsandbox.desired.networkpolicy import egress_policy, egress_policy_name, egress_rules
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.desired.pod import CONTAINER_NAME, host_pod, host_pod_name
from gymsandbox.desired.service import host_endpoint, host_service
from gymsandbox.desired.workspace import host_episodes_sub_path, host_workspace_sub_path
from gymsandbox.handlers.children import delete_pod, ensure_network_policy, ensure_pod, ensure_service
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
from gymsandbox.handlers.context import (
    ERROR_BACKOFF_SECONDS,
    IDLE_SECONDS,
    PRUNE_SECONDS,
    RESYNC_SECONDS,
    OperatorContext,
)
from gymsandbox.handlers.leases import ensure_lease_secret
from gymsandbox.kube.client import (
    EPISODE,
    GYMHOST,
    NETWORK_POLICY,
    POD,
    PVC,
    RUNTIME_CLASS,
    SECRET,
    STORAGE_CLASS,
    ChildConflictError,
    Kube,
    namespace_terminating,
)
from gymsandbox.leases import Claims, Kind, Scope
from gymsandbox.metrics import METRICS, host_phase
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import EgressError, ResolutionError, ResolvedTarget, egress_targets, resolve
from gymsandbox.policy.hosts import HostReferences, HostVerdict, host_expiry, judge_host, parse_host_spec
from gymsandbox.policy.references import claim_names, secret_values
from gymsandbox.status.conditions import merge_conditions
from gymsandbox.status.gymhost import HostObservation, compute_host_conditions

KIND: Kind = "GymHost"
RESOURCE = "gymhosts"


@dataclass(frozen=True)
class Children:
    """What the reconcile saw or made, for the status fields beside the conditions."""

    lease_secret_name: str | None = None
    endpoint: str | None = None
    resolved: tuple[ResolvedTarget, ...] = ()
    # Kept in memory only, to redact from log tails: the host's token and its envFrom Secrets' values.
    secrets: tuple[str, ...] = ()


def expiry(meta: Mapping[str, Any], spec: GymHostSpec, policy: ClusterPolicy) -> datetime:
    created = parse_time(meta["creationTimestamp"])
    assert created is not None  # the API server always sets it
    return host_expiry(created, spec, policy)


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


def observe(
    ctx: OperatorContext, body: Mapping[str, Any], now: datetime
) -> tuple[HostObservation, Children, GymHostSpec | None]:
    """Make the world match the spec as far as policy allows, and report what is there. A child name taken
    by an object this host does not control is a refusal, not a crash loop."""
    try:
        return _observe(ctx, body, now)
    except ChildConflictError as e:
        return HostObservation(refusal=Refusal(Reason.CHILD_CONFLICT, str(e))), Children(), None


def _observe(
    ctx: OperatorContext, body: Mapping[str, Any], now: datetime
) -> tuple[HostObservation, Children, GymHostSpec | None]:
    kube, meta = ctx.kube, body["metadata"]
    owner = Owner(KIND, meta["name"], meta["namespace"], meta["uid"])
    pod_name = host_pod_name(owner)
    verdict, references = host_verdict(kube, body, ctx.policy, now)
    if verdict.refusal or verdict.spec is None:
        delete_pod(kube, owner, pod_name)  # a spec that is no longer admitted must not keep running
        return HostObservation(refusal=verdict.refusal), Children(), None
    spec, env_secrets, expires_at = verdict.spec, references.secrets, verdict.expires_at
    assert expires_at is not None  # judged for every spec that passes
    if verdict.expired:
        delete_pod(kube, owner, pod_name)
        if spec.lifetime.expiry_policy == "Delete" and kube.delete(
            GYMHOST, owner.namespace, owner.name, uid=owner.uid
        ):
            lag = (datetime.now(UTC) - expires_at).total_seconds()
            METRICS.reaped(RESOURCE, "expired", lag)
        return HostObservation(expired=True), Children(), spec
    try:
        resolved: list[ResolvedTarget] | None = resolve(
            egress_targets(spec.egress),
            ctx.policy.egress.static_hosts,
            ctx.resolver,
            allowed_private=ctx.policy.egress.allowed_private_networks,
            denied=ctx.policy.egress.denied_networks,
        )
        egress_error = None
    except ResolutionError as e:
        resolved, egress_error = None, str(e)
    except EgressError as e:
        delete_pod(kube, owner, pod_name)
        return HostObservation(refusal=Refusal(Reason.EGRESS_INVALID, str(e))), Children(), spec
    host_claims = Claims(
        kind=KIND,
        namespace=owner.namespace,
        name=owner.name,
        uid=owner.uid,
        scope=Scope.HOST,
        expires_at=int(expires_at.timestamp()),
    )
    secret_name, token = ensure_lease_secret(kube, owner, ctx.signing_key, host_claims, int(now.timestamp()))
    if resolved is not None:
        network_policy: Manifest | None = ensure_network_policy(
            kube, owner, egress_policy(owner, egress_rules(ctx.policy, resolved))
        )
    else:
        network_policy = kube.get(NETWORK_POLICY, owner.namespace, egress_policy_name(owner))
    ensure_service(kube, owner, host_service(owner, spec))
    secrets = (token, *secret_values(env_secrets))
    children = Children(secret_name, host_endpoint(owner, spec), tuple(resolved or ()), secrets)
    profile = ctx.policy.runtime_profiles[spec.runtime]
    runtime_missing = None
    if kube.get(RUNTIME_CLASS, None, profile.runtime_class_name) is None:
        runtime_missing = (
            f"RuntimeClass {profile.runtime_class_name} (profile {spec.runtime}) does not exist;"
            " the pod is not created rather than run in another runtime"
        )
    pod = None
    if network_policy is not None and runtime_missing is None:
        pod = ensure_pod(kube, owner, host_pod(owner, spec, ctx.policy, secret_name))
    observation = HostObservation(
        egress_error=egress_error,
        runtime_class_missing=runtime_missing,
        claim_problem=claim_problem(kube, owner.namespace, spec),
        pod=pod,
        sandbox_error=sandbox_error(kube, pod, now),
    )
    return observation, children, spec


def status_fields(ctx: OperatorContext, body: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The full new `status` (merge-patch form: None removes a field)."""
    meta = body["metadata"]
    previous = body.get("status") or {}
    observation, children, spec = observe(ctx, body, now)
    verdict = compute_host_conditions(observation)
    generation = int(meta.get("generation") or 0)
    conditions = merge_conditions(previous.get("conditions") or [], verdict.conditions, generation, now)
    failure = failure_fields(ctx.kube, verdict.failure, observation.pod, CONTAINER_NAME, children.secrets)
    pod = observation.pod or {}
    expires_at = expiry(meta, spec, ctx.policy) if spec else None
    announce(ctx, body, previous, verdict.conditions, verdict.failure)
    return {
        "observedGeneration": generation,
        "conditions": conditions,
        "endpoint": children.endpoint,
        "podName": pod.get("metadata", {}).get("name"),
        "podIP": (pod.get("status") or {}).get("podIP"),
        "leaseSecretName": children.lease_secret_name,
        "workspaceSubPath": host_workspace_sub_path(meta["uid"]),
        "episodesSubPath": host_episodes_sub_path(meta["uid"]),
        "expiresAt": timestamp(expires_at),
        "resolvedEgress": [{"entry": r.entry, "addresses": list(r.cidrs)} for r in children.resolved],
        "failure": failure,
    }


def refresh_host(ctx: OperatorContext, body: Mapping[str, Any]) -> None:
    """Reconcile one host and write its status, never two at once for the same host."""
    meta = body["metadata"]
    with ctx.locks(meta["uid"]):
        try:
            status = status_fields(ctx, body, now())
            METRICS.hosts.set(meta["uid"], meta["namespace"], Tally([host_phase(status)]))
            if status_changed(body.get("status") or {}, status):
                ctx.kube.patch_status(GYMHOST, meta["namespace"], meta["name"], status)
        except ApiException as e:
            if e.status == 404 or namespace_terminating(e):
                return  # deleted meanwhile: nothing left to reconcile
            raise


@kopf.on.resume(GROUP, VERSION, "gymhosts", backoff=ERROR_BACKOFF_SECONDS)
@kopf.on.create(GROUP, VERSION, "gymhosts", backoff=ERROR_BACKOFF_SECONDS)
@kopf.on.update(GROUP, VERSION, "gymhosts", field="spec", backoff=ERROR_BACKOFF_SECONDS)
@observed("gymhost_reconcile")
def reconcile(body: kopf.Body, memo: kopf.Memo, reason: str, **_: Any) -> None:
    if reason == "create":
        METRICS.created(str(body.metadata.uid), str(body.metadata.creation_timestamp))
    refresh_host(memo.context, body)


@kopf.timer(
    GROUP,
    VERSION,
    "gymhosts",
    interval=RESYNC_SECONDS,
    initial_delay=RESYNC_SECONDS,
    backoff=ERROR_BACKOFF_SECONDS,
)
@observed("gymhost_resync")
def resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Drift correction and DNS re-resolution, level-based: the same reconcile on a timer."""
    ctx: OperatorContext = memo.context
    refresh_host(ctx, body)
    if ctx.due("prune", PRUNE_SECONDS):
        ctx.prune()
        METRICS.prune(IDLE_SECONDS, started_seconds=IDLE_SECONDS * 24)


@METRICS.timed("gymhost_pod_changed")
def host_pod_changed(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """A host pod's event, as its watch delivers it (handlers/watches.py): its owner's status follows it
    now rather than at the next resync (but not for a listing: kopf resumes every host at start)."""
    meta = body["metadata"]
    owner_ref = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == KIND), None)
    if owner_ref is None or type is None:
        return
    host = ctx.kube.get(GYMHOST, str(meta["namespace"]), owner_ref["name"])
    if (
        host is None
        or host["metadata"]["uid"] != owner_ref["uid"]
        or host["metadata"].get("deletionTimestamp")
    ):
        return
    refresh_host(ctx, host)


@kopf.on.event("", "v1", "namespaces")
@observed("namespace_event")
def namespace_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Release the hosts of a namespace being deleted. kopf stops watching a terminating namespace as soon
    as its conditions say nothing remains, which can come before the namespace controller marks our
    objects deleted; their finalizer would then hold the namespace in Terminating forever."""
    ctx: OperatorContext = memo.context
    namespace = str(body.metadata.name)
    if not body.metadata.get("deletionTimestamp") or not ctx.watches(namespace):
        return
    release_hosts(ctx, namespace, ctx.kube.list(GYMHOST, namespace))


def release_hosts(ctx: OperatorContext, namespace: str, hosts: list[Manifest]) -> None:
    """Release each listed host and drop our finalizer. A host gone since the list is done with; one
    changed since is retried on the next event (kopf.TemporaryError, no traceback)."""
    for host in hosts:
        meta = host["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            continue
        release(ctx, Owner(KIND, meta["name"], namespace, meta["uid"]))
        kept = [f for f in finalizers if f != FINALIZER]
        # resourceVersion makes it a compare-and-swap: a concurrent change wins and the next event retries.
        try:
            ctx.kube.patch(
                GYMHOST,
                namespace,
                meta["name"],
                {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}},
            )
        except ApiException as e:
            if e.status == 404:
                continue
            if e.status == 409:
                raise kopf.TemporaryError(f"gymhost {meta['name']} changed meanwhile", delay=1) from None
            raise


def release(ctx: OperatorContext, owner: Owner) -> None:
    """Stop the host's pod and its episodes' sandbox pods at once, and close its episodes, including those
    not adopted yet (the garbage collector knows only owned ones, and deletes some twenty objects a
    second); the collector removes the other children."""
    delete_pod(ctx.kube, owner, host_pod_name(owner))
    ctx.kube.delete_collection(EPISODE, owner.namespace, fields=f"spec.hostRef.name={owner.name}")
    ctx.kube.delete_collection(POD, owner.namespace, labels=host_sandbox_pods_selector(owner.uid))
    ctx.forget_host(owner.uid)
    ctx.hosts.remove({"metadata": {"namespace": owner.namespace, "name": owner.name, "uid": owner.uid}})
    METRICS.forget_host(owner.uid)


@kopf.on.delete(GROUP, VERSION, "gymhosts", retries=5, backoff=2)
@observed("gymhost_cleanup")
def cleanup(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Bounded by retries: after them kopf gives up, posts the error and releases the finalizer."""
    ctx: OperatorContext = memo.context
    release(ctx, Owner(KIND, str(body.metadata.name), str(body.metadata.namespace), str(body.metadata.uid)))
