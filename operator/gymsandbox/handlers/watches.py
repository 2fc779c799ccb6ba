"""The watches kept off kopf (kube/informer.py): episodes, their sandbox pods, lease Secrets and
NetworkPolicies (these two only stored, for the drift pass) and the hosts' pods, started when the operator
starts. kopf watches only GymHosts and namespaces.

kopf filters an event handler's labels on its side: a handler of host pods made it watch, and decode,
every pod of the namespace, each sandbox pod's four or so events included (a third of the operator's CPU
in a burst of episodes). These watches select by label on the API server.

kopf runs its startup handlers before it watches anything, so the listings here are complete before any
GymHost handler or timer runs, and before any event is handled: no admission is decided from a partial
picture. The namespaces are watched one by one when they are named; with patterns (or none), every
namespace is, and the events of the others are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import kopf

from gymsandbox.desired.labels import HOST_CHILDREN, SANDBOX_CHILDREN
from gymsandbox.desired.owner import Manifest
from gymsandbox.handlers.common import observed
from gymsandbox.handlers.context import WORKERS, OperatorContext
from gymsandbox.handlers.episode import episode_event, episode_pod_changed, episode_seen
from gymsandbox.handlers.gymhost import host_pod_changed
from gymsandbox.kube.client import EPISODE, NETWORK_POLICY, POD, SECRET
from gymsandbox.kube.informer import Handle, Informer, WorkQueue
from gymsandbox.kube.store import Store, slim_pod

LOG = logging.getLogger("gymsandbox")
PATTERN_CHARACTERS = frozenset("*?[!")

Seen = Callable[[OperatorContext, str | None, Manifest], None]


def kept_in(store: Store) -> Seen:
    """An event into `store` (the pods' stores; an episode's is episode_seen)."""

    def seen(_: OperatorContext, type: str | None, body: Manifest) -> None:
        if type == "DELETED":
            store.remove(body)
        else:
            store.put(body)

    return seen


class Watches:
    """The informers, and the work queue their events go to."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.queue = WorkQueue(WORKERS)
        # Host pods are read from the API server when a host is reconciled: their store only lets a listing
        # find what a watch gap hid.
        self.host_pods = Store(keep=slim_pod)
        scopes = watched_namespaces(ctx.namespaces)
        self.informers = [
            Informer(
                ctx.kube,
                kind,
                scope,
                name=name,
                labels=labels,
                store=store,
                handle=self.handler(ctx, kind.plural, seen, handle),
            )
            for name, kind, labels, store, seen, handle in (
                ("sandbox-pods", POD, SANDBOX_CHILDREN, ctx.pods, kept_in(ctx.pods), episode_pod_changed),
                ("episodes", EPISODE, "", ctx.episodes, episode_seen, episode_event),
                ("host-pods", POD, HOST_CHILDREN, self.host_pods, kept_in(self.host_pods), host_pod_changed),
                # Only stored: the drift pass reads them (handlers/episode_children.py).
                ("sandbox-secrets", SECRET, SANDBOX_CHILDREN, ctx.secrets, kept_in(ctx.secrets), None),
                (
                    "sandbox-policies",
                    NETWORK_POLICY,
                    SANDBOX_CHILDREN,
                    ctx.policies,
                    kept_in(ctx.policies),
                    None,
                ),
            )
            for scope in scopes
        ]

    def handler(self, ctx: OperatorContext, plural: str, seen: Seen, handle: Seen | None) -> Handle:
        """Into the store at once, in the watch's thread; then the handler, if any, on the queue."""
        then = None if handle is None else partial(handle, ctx)

        def on_event(type: str | None, body: Manifest) -> None:
            meta = body.get("metadata") or {}
            if not meta.get("uid") or not ctx.watches(str(meta.get("namespace"))):
                return
            seen(ctx, type, body)
            if then is not None:
                self.queue.add(f"{plural}/{meta['uid']}", type, body, then)

        return on_event

    def start(self) -> None:
        """List every kind (pods first: an episode's reconcile reads its pod), then watch and handle."""
        for informer in self.informers:
            informer.list()
        for informer in self.informers:
            informer.start()
        self.queue.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
        self.queue.stop()


def watched_namespaces(namespaces: tuple[str, ...]) -> list[str | None]:
    """Each namespace named; None (every namespace) when none is, or when any is a pattern."""
    if not namespaces or any(PATTERN_CHARACTERS & set(n) for n in namespaces):
        return [None]
    return list(namespaces)


@kopf.on.startup()
@observed("watches_start")
def start_watches(memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext = memo.context
    watches = Watches(ctx)
    watches.start()
    memo.watches = watches
    LOG.info(
        "watching episodes and their children: %d listed, %d pods, %d Secrets, %d NetworkPolicies",
        len(ctx.episodes),
        len(ctx.pods),
        len(ctx.secrets),
        len(ctx.policies),
    )


@kopf.on.cleanup()
def stop_watches(memo: kopf.Memo, **_: Any) -> None:
    watches: Watches | None = getattr(memo, "watches", None)
    if watches is not None:
        watches.stop()
