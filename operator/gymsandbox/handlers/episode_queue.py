"""An episode's admission: policy (judge), then its host's FIFO queue under episodes.maxConcurrent, and the
reaping of the expired, decided from the episode store (kube/store.py), never from a listing.

A slot is decided in memory (OperatorContext.admissions) under the host's lock, so two decisions never
overlap, and written by the episode's own reconcile in the same status write as its first conditions,
before any child exists: a restart that loses an unwritten decision loses nothing else.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.owner import Manifest
from gymsandbox.handlers.common import now, parse_time, timestamp
from gymsandbox.handlers.context import Admission, OperatorContext
from gymsandbox.handlers.gymhost import host_verdict
from gymsandbox.handlers.sandboxes import end_lingering_sandboxes, stop_sandboxes
from gymsandbox.kube.client import EPISODE, GYMHOST, Kind
from gymsandbox.kube.store import newer
from gymsandbox.metrics import METRICS, episode_phase
from gymsandbox.plan.episodes import Judged, effective_ttl
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.episodes import EpisodeRequest, admit_episode, episode_runtime
from gymsandbox.policy.hosts import HostVerdict, refused_by_host
from gymsandbox.policy.queue import EpisodeSlot, plan_queue, position_due

RESOURCE = "episodesandboxes"
# A host's counts (status.episodes) are written at most this often while episodes come and go (the last ones
# within COUNTS_SECONDS + REAP_SECONDS of the change): a custom resource's status patch is among the API
# server's dearest writes, and at 1 s a burst over ten hosts cost 0.3 host writes per episode.
COUNTS_SECONDS = 5.0
# Queue positions are exact once no episode of the host has been admitted for this long (policy/queue.py
# position_due); the host's tick (REAP_SECONDS) brings that pass when the queue stops moving. Not shorter:
# slots freeing in waves (TTLs of a few seconds) would rewrite the whole queue between waves.
STILL_SECONDS = 5.0
# A host's verdict is judged again at least this often for its episodes: a claim or Secret it names may have
# changed (its own reconcile judges it as often, on its resync).
HOST_VERDICT_SECONDS = 10.0


def judge(ctx: OperatorContext, episode: Mapping[str, Any], host: Manifest | None) -> Judged:
    try:
        spec = EpisodeSandboxSpec.model_validate(episode.get("spec") or {})
    except ValidationError as e:
        return Judged(None, None, Refusal(Reason.INVALID_SPEC, validation_message(e)))
    host_name = spec.host_ref.name
    if host is None or host["metadata"].get("deletionTimestamp"):
        why = "does not exist" if host is None else "is being deleted"
        return Judged(spec, None, Refusal(Reason.HOST_NOT_FOUND, f"GymHost {host_name} {why}"))
    verdict = judged_host(ctx, host)
    refusal = refused_by_host(host_name, verdict)
    if refusal is not None or verdict.spec is None:
        return Judged(spec, verdict.spec, refusal)
    return Judged(spec, verdict.spec, admit_episode(EpisodeRequest(spec, verdict.spec, ctx.policy)))


def judged(ctx: OperatorContext, episode: Mapping[str, Any], host: Manifest | None) -> Judged:
    """`judge`, once per episode spec and host verdict: a burst plans every episode of a host on each create
    and reconciles each on every event, and the host's status (its counts) changes every second without
    changing a verdict."""
    meta, host_meta = episode["metadata"], (host or {}).get("metadata") or {}
    key = (
        meta.get("generation"),
        host_meta.get("uid"),
        judged_host(ctx, host) if host is not None else None,
        bool(host_meta.get("deletionTimestamp")),
    )
    return ctx.memo.get(meta["uid"], "judged", key, lambda: judge(ctx, episode, host))


def judged_host(ctx: OperatorContext, host: Manifest) -> HostVerdict:
    """The host's whole verdict (policy/hosts.py, as its own reconcile judges it), judged again once its spec
    changes and in each window of HOST_VERDICT_SECONDS: the Secrets and claims it names can change without
    its spec. An equal verdict stays the same object (kube/memo.py): the episodes' keys compare it by
    identity first."""
    meta = host["metadata"]
    versions = (meta.get("generation"), int(time.monotonic() // HOST_VERDICT_SECONDS))
    return ctx.memo.get(
        meta["uid"],
        "host-verdict",
        versions,
        lambda: host_verdict(ctx.kube, host, ctx.policy, now())[0],
        same_if_equal=True,
    )


def belongs_to(episode: Mapping[str, Any], host_uid: str) -> bool:
    """Grouped by hostRef.name; skip leftovers owned by an earlier incarnation of a same-named host."""
    owned = False
    for ref in episode["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == "GymHost":
            if ref.get("uid") == host_uid:
                return True
            owned = True
    return not owned


def admitted_at(ctx: OperatorContext, episode: Mapping[str, Any]) -> datetime | None:
    """When the episode took its slot: its status, or a decision not yet written."""
    stored = parse_time((episode.get("status") or {}).get("admittedAt"))
    pending = ctx.admissions.get(episode["metadata"]["uid"])
    return stored or (pending.admitted_at if pending else None)


def slot(ctx: OperatorContext, episode: Mapping[str, Any], verdict: Judged) -> EpisodeSlot:
    meta = episode["metadata"]
    created = parse_time(meta["creationTimestamp"])
    assert created is not None  # the API server always sets it
    since = admitted_at(ctx, episode)
    spec, host_spec = verdict.spec, verdict.host_spec
    expires_at = None
    if since and spec and host_spec:
        expires_at = since + timedelta(seconds=effective_ttl(spec, host_spec, ctx.policy))
    deadline = None
    if spec and spec.admission_timeout_seconds:
        deadline = created + timedelta(seconds=spec.admission_timeout_seconds)
    return EpisodeSlot(
        name=meta["name"],
        created=created,
        admitted=since is not None,
        closing=bool(meta.get("deletionTimestamp")),
        admissible=verdict.refusal is None,
        expires_at=expires_at,
        wait_deadline=deadline,
    )


@dataclass(frozen=True)
class Planned:
    """What the planner reads of one version of an episode: its slot, its phase (metrics.episode_phase) and
    the expiresAt its status holds."""

    slot: EpisodeSlot
    phase: str
    stored_expiry: datetime | None


def planned_slot(ctx: OperatorContext, episode: Mapping[str, Any], host: Manifest) -> Planned:
    """The episode as the planner sees it, kept per version of the episode, decision not yet written and host
    verdict: a burst plans every episode of a host on each create."""
    meta, host_meta = episode["metadata"], host["metadata"]
    key = (
        meta.get("resourceVersion"),
        ctx.admissions.get(meta["uid"]),
        host_meta.get("uid"),
        judged_host(ctx, host),
        bool(host_meta.get("deletionTimestamp")),
    )
    return ctx.memo.get(
        meta["uid"],
        "planned",
        key,
        lambda: Planned(
            slot(ctx, episode, judged(ctx, episode, host)),
            episode_phase(episode),
            parse_time((episode.get("status") or {}).get("expiresAt")),
        ),
    )


def host_episodes(ctx: OperatorContext, host: Manifest) -> list[Manifest]:
    """The host's episodes from the store (its watch lists them again after a gap it cannot resume, and a
    deletion the gap hid is then seen: kube/informer.py)."""
    meta = host["metadata"]
    return [e for e in ctx.episodes.group(meta["namespace"], meta["name"]) if belongs_to(e, meta["uid"])]


def sync_host_episodes(
    ctx: OperatorContext,
    host: Manifest,
    moment: datetime,
    *,
    retry: bool = False,
    ticket: int | None = None,
) -> list[str]:
    """Reap, admit in FIFO order, number the queue and count, for one host. Returns the episodes to refresh
    (admitted, renewed or timed out just now; with `retry`, also those whose last reconcile did not finish:
    an admission not written yet, a spec not observed yet).

    Sandbox pods running without an open episode (their episode deleted, closing, or deleted with its pod
    orphaned) hold slots, and are ended; every plan looks for them in the pods' store."""
    meta = host["metadata"]
    try:
        host_spec = GymHostSpec.model_validate(host.get("spec") or {})
    except ValidationError:
        return []
    kube, namespace, uid = ctx.kube, meta["namespace"], meta["uid"]
    with ctx.locks(f"episodes/{uid}"):
        if ticket is not None and ctx.plans.covered(uid, ticket):
            return []  # a run begun after this request has planned from what the request saw
        covers = ctx.plans.begin(uid)
        by_name = {e["metadata"]["name"]: e for e in host_episodes(ctx, host)}
        seen = {name: planned_slot(ctx, e, host) for name, e in by_name.items()}
        slots = {name: p.slot for name, p in seen.items()}
        open_uids = {by_name[name]["metadata"]["uid"] for name, s in slots.items() if not s.closing}
        ctx.lingering[uid] = end_lingering_sandboxes(kube, ctx.pods, namespace, uid, open_uids)
        plan = plan_queue(
            list(slots.values()),
            host_spec.episodes.max_concurrent,
            moment,
            lingering=ctx.lingering.get(uid, 0),
        )
        reap(
            ctx,
            uid,
            [by_name[name] for name in plan.expired],
            {n: slots[n].expires_at for n in slots},
            moment,
        )
        touched = list(plan.timed_out)
        if plan.admit:
            ctx.mark(f"admitted/{uid}")
        still = ctx.since(f"admitted/{uid}") >= STILL_SECONDS  # no slot taken for a moment: exact positions
        for name in plan.admit:
            episode = by_name[name]
            # Its clock starts at creation even when this tick comes before its create handler (a backlog).
            METRICS.created(episode["metadata"]["uid"], episode["metadata"]["creationTimestamp"])
            spec = EpisodeSandboxSpec.model_validate(episode["spec"])
            expires = moment + timedelta(seconds=effective_ttl(spec, host_spec, ctx.policy))
            runtime = episode_runtime(spec, host_spec)
            ctx.admissions[episode["metadata"]["uid"]] = Admission(moment, expires, runtime)
            waited = (episode.get("status") or {}).get("queuePosition") is not None
            METRICS.admitted(episode["metadata"]["uid"], waited=waited)
            touched.append(name)
        for name, episode in by_name.items():
            status = episode.get("status") or {}
            unfinished = episode["metadata"]["uid"] in ctx.admissions or status.get(
                "observedGeneration"
            ) != episode["metadata"].get("generation")
            if retry and unfinished and name not in touched:
                touched.append(name)
            planned = plan.positions.get(name)
            if planned is not None and position_due(status.get("queuePosition"), planned, still=still):
                write_status(ctx, namespace, name, {"queuePosition": planned})
            # A renewal (a new ttlSeconds) moves expiresAt of an admitted episode.
            expires_at, stored = slots[name].expires_at, seen[name].stored_expiry
            if status.get("admittedAt") and expires_at and stored != expires_at and name not in plan.expired:
                write_status(ctx, namespace, name, {"expiresAt": timestamp(expires_at)})
                touched.append(name)
        METRICS.episodes.set(
            uid, namespace, Tally(p.phase for name, p in seen.items() if name not in plan.expired)
        )
        counts = {"active": plan.active, "queued": plan.queued}
        known = newest(host, ctx.hosts.get(namespace, meta["name"]))  # this process's own write included
        if (known.get("status") or {}).get("episodes") != counts and ctx.due(f"counts/{uid}", COUNTS_SECONDS):
            write_status(ctx, namespace, meta["name"], {"episodes": counts}, kind=GYMHOST)
        ctx.plans.done(uid, covers)
    return touched


def newest(a: Manifest, b: Manifest | None) -> Manifest:
    """The later version of one object (`b` may be missing, or of an earlier incarnation)."""
    if b is None or b["metadata"].get("uid") != a["metadata"].get("uid"):
        return a
    return b if newer(b, a) else a


def reap(
    ctx: OperatorContext,
    host_uid: str,
    expired: list[Manifest],
    expiries: Mapping[str, datetime | None],
    moment: datetime,
) -> None:
    """Delete the expired episodes and end their pods; until those are gone they hold the host's slots."""
    reaped = []
    for episode in expired:
        meta = episode["metadata"]
        # Only this exact state: a renewal that landed since it was read wins over the reaper.
        if ctx.kube.delete(
            EPISODE, meta["namespace"], meta["name"], resource_version=meta["resourceVersion"]
        ):
            # Gone (episodes carry no finalizer of ours), or closing: either way it holds no slot from now
            # on, not only once the watch, which may lag far behind a burst, reports the deletion.
            ctx.episodes.remove(episode)
            reaped.append(meta["uid"])
            expired_at = expiries.get(meta["name"]) or moment
            METRICS.reaped(RESOURCE, "expired", (datetime.now(UTC) - expired_at).total_seconds())
    if reaped:
        stop_sandboxes(ctx.kube, ctx.pods, expired[0]["metadata"]["namespace"], reaped)
        ctx.lingering[host_uid] = ctx.lingering.get(host_uid, 0) + len(reaped)  # the next plan counts them


def write_status(
    ctx: OperatorContext, namespace: str, name: str, status: Mapping[str, Any], kind: Kind = EPISODE
) -> Manifest | None:
    """Merge `status` in; the answer goes to the store. None when the object is gone."""
    try:
        written = ctx.kube.patch_status(kind, namespace, name, status)
    except ApiException as e:
        if e.status != 404:  # deleted meanwhile
            raise
        return None
    (ctx.episodes if kind is EPISODE else ctx.hosts).put(written)
    return written
