"""EpisodeSandbox handlers: thin; the decisions are in episode_queue (admission, FIFO, reaping) and
episode_children (the children and their repair).

Two loops share the work, both level-based, both reading the stores the watches feed (kube/store.py):
- per host (`sync_host_episodes`, under the host's lock): reap the expired, decide admissions in FIFO order
  up to episodes.maxConcurrent, number the queue, count.
- per episode (`refresh_episode`, under the episode's lock): a decided admission is written first, with
  the first conditions, in one status write; then its lease Secret (owner token) and NetworkPolicy at once,
  then its Pod; then its conditions. A change that is only a pod's progress towards Ready is written once it
  has lasted PROGRESS_SECONDS, so an episode whose pod starts at once costs two status writes in all.
The host loop runs when an episode is created, changes its spec or is deleted, and on the engine's clock
(`episodes_tick`); the episode loop then, on its pod's events and from the drift pass. Episodes carry no
finalizer and no annotation of ours; a spec change is a generation the status has not observed yet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gymsandbox.api.conditions import ConditionType
from gymsandbox.api.names import LABEL_HOST
from gymsandbox.desired.owner import Manifest
from gymsandbox.desired.pod import EPISODE_CONTAINER_NAME, episode_pod_name
from gymsandbox.desired.secret import lease_secret_name
from gymsandbox.handlers.common import (
    announce,
    failure_fields,
    needs_reconcile,
    now,
    status_changed,
    timestamp,
)
from gymsandbox.handlers.context import (
    RESYNC_SECONDS,
    Admission,
    OperatorContext,
    host_of,
)
from gymsandbox.handlers.episode_children import (
    current_host,
    episodes_needing_repair,
    observe_episode,
    owner_of,
)
from gymsandbox.handlers.episode_queue import sync_host_episodes, write_status
from gymsandbox.kube.client import EPISODE, api_outage, api_refusal, namespace_terminating
from gymsandbox.metrics import METRICS
from gymsandbox.status.conditions import merge_conditions
from gymsandbox.status.episode import EpisodeObservation, EpisodeVerdict, compute_episode_conditions

LOG = logging.getLogger("gymsandbox")
# How often each host's episodes are reaped and admitted even without events.
REAP_SECONDS = 2.0
# A pod's progress towards Ready (scheduled, pulling, creating) is written once it has lasted this long: a
# pod that starts within it (a cached image on a warm node; a gVisor sandbox takes 1-3 s) costs no third
# status write, one that takes longer (an image pull, a node busy with a burst) shows where it is.
PROGRESS_SECONDS = 5.0


def episode_status(
    ctx: OperatorContext, episode: Mapping[str, Any], moment: datetime, *, fresh: bool = False
) -> tuple[dict[str, Any], EpisodeVerdict]:
    """Conditions and child fields. Admission fields (admittedAt, expiresAt, queuePosition) are written by
    `write_admission` and the host loop, never here."""
    meta, previous = episode["metadata"], episode.get("status") or {}
    observation, children = observe_episode(ctx, episode, moment, fresh=fresh)
    verdict = compute_episode_conditions(observation)
    generation = int(meta.get("generation") or 0)
    pod = observation.pod or {}
    status = {
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
    return status, verdict


def write_admission(
    ctx: OperatorContext, episode: Mapping[str, Any], admission: Admission, moment: datetime
) -> Mapping[str, Any] | None:
    """The slot decided in memory, with the conditions of a pod about to be made and the children's names,
    in one status write before any child exists. The new episode, or None when it is gone."""
    meta, previous = episode["metadata"], episode.get("status") or {}
    owner = owner_of(episode)
    verdict = compute_episode_conditions(EpisodeObservation(admitted=True))
    generation = int(meta.get("generation") or 0)
    status = {
        "admittedAt": timestamp(admission.admitted_at),
        "expiresAt": timestamp(admission.expires_at),
        "queuePosition": None,
        "observedGeneration": generation,
        "conditions": merge_conditions(
            previous.get("conditions") or [], verdict.conditions, generation, moment
        ),
        "runtime": admission.runtime,
        "podName": episode_pod_name(owner),
        "leaseSecretName": lease_secret_name(owner),
        "failure": None,
    }
    written = write_status(ctx, meta["namespace"], meta["name"], status)
    ctx.admissions.pop(meta["uid"], None)
    if written is not None:
        announce(ctx, episode, previous, verdict.conditions, None)
    return written


def progress_only(previous: Mapping[str, Any], status: Mapping[str, Any], verdict: EpisodeVerdict) -> bool:
    """Only the pod's way towards Ready moved: no failure before or after, Ready False in both, and no
    condition but PodScheduled changed its status."""
    if (
        verdict.failure is not None
        or previous.get("failure")
        or status.get("podName") != previous.get("podName")
    ):
        return False
    before = {str(c.get("type")): c.get("status") for c in previous.get("conditions") or []}
    after = {str(c.get("type")): c.get("status") for c in status.get("conditions") or []}
    if after.get(ConditionType.READY) != "False" or before.get(ConditionType.READY) != "False":
        return False
    return all(before.get(t) == s for t, s in after.items() if t != ConditionType.POD_SCHEDULED)


def current_episode(ctx: OperatorContext, namespace: str, name: str) -> Mapping[str, Any] | None:
    episode = ctx.episodes.get(namespace, name)
    if episode is None:
        episode = ctx.kube.get(EPISODE, namespace, name)
        ctx.episodes.put(episode)
    return episode


def refresh_episode(ctx: OperatorContext, namespace: str, name: str) -> None:
    """Reconcile the episode as last seen (the store holds the answers to this process's own writes)."""
    episode = current_episode(ctx, namespace, name)
    if episode is None or episode["metadata"].get("deletionTimestamp"):
        return
    uid = episode["metadata"]["uid"]
    with ctx.locks(uid):
        episode = ctx.episodes.get(namespace, name) or episode
        if episode["metadata"]["uid"] != uid:
            return  # replaced by a same-named episode meanwhile: its own events reconcile it
        try:
            moment = now()
            admission, fresh = ctx.admissions.get(uid), False
            if admission is not None and not (episode.get("status") or {}).get("admittedAt"):
                written = write_admission(ctx, episode, admission, moment)
                if written is None:
                    return
                episode, fresh = written, True
            previous = episode.get("status") or {}
            status, verdict = episode_status(ctx, episode, moment, fresh=fresh)
            if not status_changed(previous, status):
                return
            if progress_only(previous, status, verdict) and (ctx.episodes.age(namespace, name) or 0) < (
                PROGRESS_SECONDS
            ):
                ctx.later.call(
                    f"refresh/{uid}", PROGRESS_SECONDS, lambda: refresh_later(ctx, namespace, name)
                )
                return
            if write_status(ctx, namespace, name, status) is not None:
                announce(ctx, episode, previous, verdict.conditions, verdict.failure)
        except ApiException as e:
            if e.status != 404 and not namespace_terminating(e):
                raise  # else deleted meanwhile (the episode, or a child: the drift pass sees what is left)


def refresh_later(ctx: OperatorContext, namespace: str, name: str) -> None:
    """A deferred reconcile: the API server not answering (or refusing) is one log line, not a traceback; the
    pod's next event or the drift pass writes what it could not."""
    try:
        refresh_episode(ctx, namespace, name)
    except Exception as e:
        problem = api_outage(e) or api_refusal(e)
        if problem is None:
            raise
        LOG.warning("EpisodeSandbox %s/%s: a deferred reconcile failed (%s)", namespace, name, problem)


def sync_and_refresh(
    ctx: OperatorContext, namespace: str, host_name: str, *, also: str | None = None
) -> None:
    """The host loop, then the episode loop for what it touched (and `also`, the episode at hand), but for
    episodes whose own event handler is still to come or running: it reconciles them itself, in parallel."""
    host = current_host(ctx, namespace, host_name)
    touched = []
    if host is not None and not host["metadata"].get("deletionTimestamp"):
        # A plan begun after this call (a busy host's next one) sees what this call saw: it is enough.
        ticket = ctx.plans.ask(host["metadata"]["uid"])
        touched = sync_host_episodes(ctx, host, now(), ticket=ticket)
    for name in [also] if also is not None else []:
        refresh_episode(ctx, namespace, name)
    for name in touched:
        episode = ctx.episodes.get(namespace, name)
        if name != also and not (episode is not None and episode["metadata"]["uid"] in ctx.arriving):
            refresh_episode(ctx, namespace, name)


def episode_seen(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """An episode's event, as its watch delivers it (handlers/engine.py): into the store at once
    (admission reads it), and a new episode is `arriving` until its event has been handled."""
    meta = body["metadata"]
    if type == "DELETED":
        return
    known = ctx.episodes.get(meta["namespace"], meta["name"])
    if known is None or known["metadata"].get("uid") != meta["uid"]:
        ctx.arriving.add(meta["uid"])
    ctx.episodes.put(body)


@METRICS.timed("episode_event")
def episode_event(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """Created, renewed or found at start: admission, then the episode. Deleted: its slot frees once its
    pod is gone; end the pod and admit the next one now rather than at the next tick."""
    try:
        handle_episode_event(ctx, body, type)
    finally:
        ctx.arriving.discard(body["metadata"]["uid"])


def handle_episode_event(ctx: OperatorContext, body: Manifest, type: str | None) -> None:
    meta = body["metadata"]
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta["uid"])
    host_name = host_of(body)
    if type == "DELETED":
        ctx.episodes.remove(body)
        ctx.forget_episode(uid)
        METRICS.forget(uid)
        if host_name is not None:
            sync_and_refresh(ctx, namespace, host_name)
        return
    if needs_reconcile(body, type):
        if type == "ADDED":
            METRICS.created(uid, str(meta.get("creationTimestamp")))
        reconcile_episode(ctx, namespace, name, host_name)


@METRICS.timed("episode_reconcile")
def reconcile_episode(ctx: OperatorContext, namespace: str, name: str, host_name: str | None) -> None:
    """Admission (the host loop), then the episode."""
    if host_name is not None:
        sync_and_refresh(ctx, namespace, host_name, also=name)
    else:
        refresh_episode(ctx, namespace, name)


@METRICS.timed("episodes_tick")
def episodes_tick(ctx: OperatorContext, _: str | None, host: Manifest) -> None:
    """Reaping, admission and drift repair on a clock (handlers/engine.py, every REAP_SECONDS per host):
    expiries happen without events, and so does a restart's backlog."""
    meta = host["metadata"]
    namespace = str(meta["namespace"])
    for name in sync_host_episodes(ctx, host, now(), retry=True):
        refresh_episode(ctx, namespace, name)
    if ctx.due(f"drift/{namespace}", RESYNC_SECONDS):  # one pass covers every host of the namespace
        for name in episodes_needing_repair(ctx, namespace):
            refresh_episode(ctx, namespace, name)


@METRICS.timed("episode_pod_changed")
def episode_pod_changed(ctx: OperatorContext, type: str | None, body: Manifest) -> None:
    """A sandbox pod's event: its episode's conditions follow it (but not for a listing: the episodes'
    own listing reconciles them all)."""
    meta = body["metadata"]
    refs = meta.get("ownerReferences") or []
    owner_ref = next((r for r in refs if r.get("kind") == "EpisodeSandbox"), None)
    # Only an episode the store holds, of that uid: the pods of a reaped or deleted episode go on sending
    # events (terminating, then gone), and the store, listed before any event is handled and fed by every
    # watch event and by this process's own writes, already knows their episode is gone: no GET for each.
    if owner_ref is not None and type is not None:
        episode = ctx.episodes.get(str(meta["namespace"]), str(owner_ref["name"]))
        if episode is not None and episode["metadata"].get("uid") == owner_ref.get("uid"):
            refresh_episode(ctx, str(meta["namespace"]), str(owner_ref["name"]))
    host_label = (meta.get("labels") or {}).get(LABEL_HOST)
    if type == "DELETED" and isinstance(host_label, str) and any(ctx.lingering.values()):
        # A pod that held a slot without an open episode is gone: the next episode may take the slot now.
        sync_and_refresh(ctx, str(meta["namespace"]), host_label)


@METRICS.timed("episode_child_deleted")
def episode_child_deleted(ctx: OperatorContext, _: str | None, child: Manifest) -> None:
    """An episode's lease Secret or NetworkPolicy is gone (deleted by hand, or with its episode): what was
    remembered of its children is forgotten and a live episode reconciled, which makes the child again now
    rather than at the next drift pass. An episode that is gone, closing, or of another uid is left alone."""
    meta = child["metadata"]
    refs = meta.get("ownerReferences") or []
    owner = next((r for r in refs if r.get("kind") == "EpisodeSandbox" and r.get("controller")), None)
    if owner is None:
        return
    namespace, name = str(meta["namespace"]), str(owner.get("name"))
    episode = ctx.episodes.get(namespace, name)
    if episode is None or episode["metadata"]["uid"] != owner.get("uid"):
        return
    if episode["metadata"].get("deletionTimestamp"):
        return
    ctx.children.pop(str(owner["uid"]), None)
    refresh_episode(ctx, namespace, name)
