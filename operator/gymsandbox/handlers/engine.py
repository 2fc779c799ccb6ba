"""The engine: one work queue for both kinds, fed by the watches (kube/informer.py) and by a clock.

Every kind is watched here, by label on the API server where a label tells ours apart: GymHosts, episodes,
their sandbox pods, lease Secrets and NetworkPolicies, and the hosts' pods. An event goes into its store at
once, in the watch's thread, then onto the queue under its object's key (`kind/uid`); an event of a host's
pod goes under its host's key instead, so a host is never reconciled twice at once; the deletion of an
episode's Secret or NetworkPolicy goes under `children/<episode uid>`, which makes it again now rather than
at the next drift pass. The clock puts, every REAP_SECONDS, each host's episode tick under `ticks/uid`, and
its resync (a reconcile whatever changed: drift repair, DNS re-resolution) under the host's own key once
RESYNC_SECONDS have passed since its last reconcile. One retry policy serves every key (kube/informer.py).

Everything is listed before any key is handled (hosts first: an episode's reconcile reads its host), so no
admission is decided from a partial picture. The namespaces are watched one by one when they are named;
with patterns (or none), every namespace is, and the events of the others are dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from gymsandbox.desired.labels import HOST_CHILDREN, SANDBOX_CHILDREN
from gymsandbox.desired.owner import Manifest
from gymsandbox.handlers.context import IDLE_SECONDS, PRUNE_SECONDS, RESYNC_SECONDS, WORKERS, OperatorContext
from gymsandbox.handlers.episode import (
    REAP_SECONDS,
    episode_child_deleted,
    episode_event,
    episode_pod_changed,
    episode_seen,
    episodes_tick,
)
from gymsandbox.handlers.gymhost import KIND as HOST_KIND
from gymsandbox.handlers.gymhost import host_event, host_pod_changed, host_resync
from gymsandbox.kube.client import (
    EPISODE,
    GYMHOST,
    NETWORK_POLICY,
    POD,
    SECRET,
    api_outage,
    api_refusal,
    controller_uid,
)
from gymsandbox.kube.informer import RETRY_SECONDS, Informer, WorkQueue
from gymsandbox.kube.store import Store, slim_pod
from gymsandbox.metrics import METRICS

LOG = logging.getLogger("gymsandbox")
# How often the clock looks at every host: the granularity of the ticks and resyncs it puts on the queue.
CLOCK_SECONDS = 0.5
PATTERN_CHARACTERS = frozenset("*?[!")

Seen = Callable[[OperatorContext, str | None, Manifest], None]
# What an event becomes on the queue: (key, event type, object, handler), or None for nothing to do.
Work = tuple[str, str | None, Manifest, Callable[[str | None, Manifest], None]]
Route = Callable[[str | None, Manifest], Work | None]


def kept_in(store: Store) -> Seen:
    """An event into `store` (every store but the episodes'; theirs is episode_seen)."""

    def seen(_: OperatorContext, type: str | None, body: Manifest) -> None:
        if type == "DELETED":
            store.remove(body)
        else:
            store.put(body)

    return seen


class Engine:
    """The informers, the work queue their events go to, and the clock."""

    def __init__(self, ctx: OperatorContext, stopped: threading.Event | None = None) -> None:
        """`stopped`: set to stop the engine (the process's signal), else by `stop`."""
        self.ctx = ctx
        self.queue = WorkQueue(WORKERS, later=ctx.later)
        # Host pods are read from the API server when a host is reconciled: their store only lets a listing
        # find what a watch gap hid.
        self.host_pods = Store(keep=slim_pod)
        self._stopped = stopped if stopped is not None else threading.Event()
        self._clock = threading.Thread(target=self._run_clock, name="gymsandbox-clock", daemon=True)
        hosts, episodes = partial(host_event, ctx), partial(episode_event, ctx)
        kinds: list[tuple[str, Any, str, Store, Seen, Route | None]] = [
            ("gymhosts", GYMHOST, "", ctx.hosts, kept_in(ctx.hosts), self.by_uid("gymhosts", hosts)),
            ("host-pods", POD, HOST_CHILDREN, self.host_pods, kept_in(self.host_pods), self.to_host),
            (
                "sandbox-pods",
                POD,
                SANDBOX_CHILDREN,
                ctx.pods,
                kept_in(ctx.pods),
                self.by_uid("pods", partial(episode_pod_changed, ctx)),
            ),
            ("episodes", EPISODE, "", ctx.episodes, episode_seen, self.by_uid("episodesandboxes", episodes)),
            # Stored for the drift pass (handlers/episode_children.py); a deletion makes the child again now.
            ("sandbox-secrets", SECRET, SANDBOX_CHILDREN, ctx.secrets, kept_in(ctx.secrets), self.to_episode),
            (
                "sandbox-policies",
                NETWORK_POLICY,
                SANDBOX_CHILDREN,
                ctx.policies,
                kept_in(ctx.policies),
                self.to_episode,
            ),
        ]
        self.informers = [
            Informer(ctx.kube, kind, scope, name=name, labels=labels, store=store, handle=self.on(seen, to))
            for name, kind, labels, store, seen, to in kinds
            for scope in watched_namespaces(ctx.namespaces)
        ]

    def on(self, seen: Seen, route: Route | None) -> Callable[[str | None, Manifest], None]:
        """Into the store at once, in the watch's thread; then onto the queue where `route` says."""

        def on_event(type: str | None, body: Manifest) -> None:
            meta = body.get("metadata") or {}
            if not meta.get("uid") or not self.ctx.watches(str(meta.get("namespace"))):
                return
            seen(self.ctx, type, body)
            work = None if route is None else route(type, body)
            if work is not None:
                self.queue.add(*work)

        return on_event

    @staticmethod
    def by_uid(plural: str, handle: Callable[[str | None, Manifest], None]) -> Route:
        return lambda type, body: (f"{plural}/{body['metadata']['uid']}", type, body, handle)

    def to_host(self, type: str | None, pod: Manifest) -> Work | None:
        """A host pod's event: its host is reconciled (as for a resync), so its status follows the pod now
        rather than at the next resync; not for a listing (every host is reconciled at start)."""
        meta = pod["metadata"]
        host_uid = controller_uid(pod, HOST_KIND)
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("uid") == host_uid), None)
        if type is None or owner is None:
            return None
        host = self.ctx.hosts.get(str(meta["namespace"]), str(owner.get("name")))
        if host is None or host["metadata"]["uid"] != host_uid or host["metadata"].get("deletionTimestamp"):
            return None
        return (f"gymhosts/{host_uid}", None, host, partial(host_pod_changed, self.ctx))

    def to_episode(self, type: str | None, child: Manifest) -> Work | None:
        """An episode's Secret or NetworkPolicy deleted: under its episode's key (by the controller's uid)."""
        episode_uid = controller_uid(child, "EpisodeSandbox")
        if type != "DELETED" or episode_uid is None:
            return None
        return (f"children/{episode_uid}", type, child, partial(episode_child_deleted, self.ctx))

    def start(self) -> None:
        """List every kind, then watch, handle and tick. A listing the API server does not answer, or
        refuses (an authorizer still loading after its restart), is tried again every RETRY_SECONDS, in a
        line each time it begins failing, until it succeeds or the engine is stopped."""
        for informer in self.informers:
            if not self._listed(informer):
                return
        for informer in self.informers:
            informer.start()
        self.queue.start()
        self._clock.start()
        ctx = self.ctx
        LOG.info(
            "gymsandbox operator watching %d GymHosts and %d episodes (%d sandbox pods, %d Secrets, %d"
            " NetworkPolicies)",
            len(ctx.hosts),
            len(ctx.episodes),
            len(ctx.pods),
            len(ctx.secrets),
            len(ctx.policies),
        )

    def _listed(self, informer: Informer) -> bool:
        failing = False
        while not self._stopped.is_set():
            try:
                informer.list()
                return True
            except Exception as e:
                problem = api_outage(e) or api_refusal(e)
                if problem is None:
                    raise
                if not failing:
                    LOG.warning("listing %s failed (%s); trying again", informer.kind.plural, problem)
                failing = True
                self._stopped.wait(RETRY_SECONDS)
        return False

    def stop(self, wait_seconds: float = 0.0) -> None:
        """Take no more work; wait up to `wait_seconds` for what is being handled."""
        self._stopped.set()
        for informer in self.informers:
            informer.stop()
        self.queue.stop(wait_seconds)

    def healthy(self) -> bool:
        """Every watch and the clock still run (their threads end only on stop)."""
        return self._clock.is_alive() and all(informer.alive() for informer in self.informers)

    def _run_clock(self) -> None:
        while not self._stopped.wait(CLOCK_SECONDS):
            try:
                self.tick()
            except Exception:  # the clock never stops: one bad round is logged, the next one runs
                LOG.exception("the engine's clock failed a round")

    def tick(self) -> None:
        """Each live host's episode tick once REAP_SECONDS have passed since its last, and its resync once
        RESYNC_SECONDS have since its last reconcile: each host keeps the phase it was first seen at, so the
        hosts' ticks (and the namespace drift pass any of them may run) spread over the period. Every
        PRUNE_SECONDS, the prune."""
        ctx = self.ctx
        tick = partial(episodes_tick, ctx)
        for host in ctx.hosts.in_namespace(None):
            meta = host["metadata"]
            if meta.get("deletionTimestamp") or not ctx.watches(str(meta.get("namespace"))):
                continue
            if ctx.since(f"tick/{meta['uid']}") >= REAP_SECONDS:
                ctx.mark(f"tick/{meta['uid']}")
                self.queue.add(f"ticks/{meta['uid']}", None, host, tick)
            if ctx.since(f"resync/{meta['uid']}") >= RESYNC_SECONDS:
                self.queue.add(f"gymhosts/{meta['uid']}", None, host, partial(host_resync, ctx))
        if ctx.due("prune", PRUNE_SECONDS):
            ctx.prune()
            METRICS.prune(IDLE_SECONDS, started_seconds=IDLE_SECONDS * 24)


def watched_namespaces(namespaces: tuple[str, ...]) -> list[str | None]:
    """Each namespace named; None (every namespace) when none is, or when any is a pattern."""
    if not namespaces or any(PATTERN_CHARACTERS & set(n) for n in namespaces):
        return [None]
    return list(namespaces)
