"""The watches of episodes and of their pods (handlers/informer.py), started when the operator starts.

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

from gymsandbox.api.names import LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.desired.labels import COMPONENT_EPISODE
from gymsandbox.desired.owner import Manifest
from gymsandbox.handlers.common import observed
from gymsandbox.handlers.context import WORKERS, OperatorContext
from gymsandbox.handlers.episode import episode_event, episode_pod_changed, episode_seen, pod_seen
from gymsandbox.handlers.informer import Handle, Informer, WorkQueue
from gymsandbox.handlers.kube import EPISODE, POD

LOG = logging.getLogger("gymsandbox")
SANDBOX_PODS = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_EPISODE}"
PATTERN_CHARACTERS = frozenset("*?[!")

Seen = Callable[[OperatorContext, str | None, Manifest], None]


class EpisodeWatches:
    """The informers of episodes and sandbox pods, and the work queue their events go to."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.queue = WorkQueue(WORKERS)
        scopes = watched_namespaces(ctx.namespaces)
        self.informers = [
            Informer(
                ctx.kube,
                kind,
                scope,
                labels=labels,
                store=store,
                handle=self.handler(ctx, kind.plural, seen, handle),
            )
            for kind, labels, store, seen, handle in (
                (POD, SANDBOX_PODS, ctx.pods, pod_seen, episode_pod_changed),
                (EPISODE, "", ctx.episodes, episode_seen, episode_event),
            )
            for scope in scopes
        ]

    def handler(self, ctx: OperatorContext, plural: str, seen: Seen, handle: Seen) -> Handle:
        """Into the store at once, in the watch's thread; then the handler, on the queue."""
        then = partial(handle, ctx)

        def on_event(type: str | None, body: Manifest) -> None:
            meta = body.get("metadata") or {}
            if not meta.get("uid") or not ctx.watches(str(meta.get("namespace"))):
                return
            seen(ctx, type, body)
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
@observed("episode_watches_start")
def start_episode_watches(memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext = memo.context
    watches = EpisodeWatches(ctx)
    watches.start()
    memo.episode_watches = watches
    LOG.info("watching episodes and their pods: %d listed, %d pods", len(ctx.episodes), len(ctx.pods))


@kopf.on.cleanup()
def stop_episode_watches(memo: kopf.Memo, **_: Any) -> None:
    watches: EpisodeWatches | None = getattr(memo, "episode_watches", None)
    if watches is not None:
        watches.stop()
