"""What every handler shares: the cluster policy, the API access, the signing key, the stores and what is
kept per object."""

from __future__ import annotations

import contextvars
import fnmatch
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from gymsandbox.api.names import LABEL_HOST_UID
from gymsandbox.kube.client import Kube
from gymsandbox.kube.events import EventPoster
from gymsandbox.kube.later import Later
from gymsandbox.kube.memo import Memo
from gymsandbox.kube.store import Store, slim_network_policy, slim_pod, slim_secret
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import BoundedResolver, Resolver

# How often every object is reconciled even without events: drift repair and DNS re-resolution.
RESYNC_SECONDS = float(os.environ.get("GYMSANDBOX_RESYNC_SECONDS", "10"))
# Handlers block on API calls; more threads than asyncio's default (CPUs + 4) keep episodes moving. Each
# handler thread may have one helper thread making a request alongside it (OperatorContext.alongside).
WORKERS = 32
# What is kept per object is dropped after this long without a reconcile of it (OperatorContext.prune).
IDLE_SECONDS = 3600.0
PRUNE_SECONDS = 300.0
LOG = logging.getLogger("gymsandbox")
T = TypeVar("T")


def host_of(episode: Mapping[str, Any]) -> str | None:
    """The host an episode names (its group in the episode store)."""
    ref = (episode.get("spec") or {}).get("hostRef") or {}
    return ref.get("name") if isinstance(ref.get("name"), str) else None


def host_uid_of(pod: Mapping[str, Any]) -> str | None:
    """The host uid a sandbox pod carries (its group in the pod store): it outlives its episode."""
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_HOST_UID)
    return label if isinstance(label, str) else None


class KeyedLocks:
    """One lock per key (an object's uid): reconciles of the same object never overlap across the create
    handler, the clock and child events, which the work queue runs under different keys."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._used: dict[str, float] = {}

    def __call__(self, key: str) -> threading.Lock:
        with self._guard:
            self._used[key] = time.monotonic()
            return self._locks.setdefault(key, threading.Lock())

    def busy_since(self, key: str, moment: float) -> bool:
        """Held now, or asked for at or after `moment` (monotonic)."""
        with self._guard:
            lock = self._locks.get(key)
            return lock is not None and (lock.locked() or self._used[key] >= moment)

    def forget(self, key: str) -> None:
        with self._guard:
            self._locks.pop(key, None)
            self._used.pop(key, None)

    def prune(self, idle_seconds: float) -> None:
        """Drop the locks of keys nobody asked for in `idle_seconds` and nobody holds: an object whose
        deletion this process never saw (a watch gap) costs nothing for long."""
        cutoff = time.monotonic() - idle_seconds
        with self._guard:
            for key in [k for k, used in self._used.items() if used < cutoff and not self._locks[k].locked()]:
                del self._locks[key], self._used[key]

    def __contains__(self, key: str) -> bool:
        with self._guard:
            return key in self._locks


class Coalesced:
    """Requests for a job per key (the host loop) that a later run makes redundant: a run that began after a
    request was made covers it (a plan begun after an episode's event reads the store that event updated)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: dict[str, int] = {}
        self._covered: dict[str, int] = {}

    def ask(self, key: str) -> int:
        """A request; its ticket."""
        with self._lock:
            self._asked[key] = ticket = self._asked.get(key, 0) + 1
            return ticket

    def covered(self, key: str, ticket: int) -> bool:
        with self._lock:
            return self._covered.get(key, 0) >= ticket

    def begin(self, key: str) -> int:
        """A run starts (callers serialize runs per key): the requests it covers once it is done."""
        with self._lock:
            return self._asked.get(key, 0)

    def done(self, key: str, covers: int) -> None:
        with self._lock:
            self._covered[key] = max(self._covered.get(key, 0), covers)

    def forget(self, key: str) -> None:
        with self._lock:
            self._asked.pop(key, None)
            self._covered.pop(key, None)


@dataclass(frozen=True)
class Admission:
    """An admission decided in memory and not yet written to the episode's status."""

    admitted_at: datetime
    expires_at: datetime
    runtime: str | None = None  # the runtime profile it runs under (status.runtime)


@dataclass
class Made:
    """An episode's children this process made or checked."""

    lease: tuple[Any, str, str] | None = None  # what its token is for, the Secret's name, the token
    policy: str | None = None  # the NetworkPolicy's template hash
    since: float = field(default_factory=time.monotonic)  # when this process first made or checked them


@dataclass(frozen=True)
class OperatorContext:
    policy: ClusterPolicy
    kube: Kube
    signing_key: SigningKey
    # Namespace patterns this operator serves (globs, "!" excludes); empty: every namespace.
    namespaces: tuple[str, ...] = ()
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    # Per host uid: the host loop's runs, so that a burst of events plans once per run, not once per event.
    plans: Coalesced = field(default_factory=Coalesced)
    resolver: Resolver = field(default_factory=BoundedResolver)
    _last_run: dict[str, float] = field(default_factory=dict)
    _due_lock: threading.Lock = field(default_factory=threading.Lock)
    # Per host uid: sandbox pods still running without an open episode at the last look (each holds a slot).
    lingering: dict[str, int] = field(default_factory=dict)
    # What the watches have seen (kube/store.py): episodes by host, their children, hosts.
    episodes: Store = field(default_factory=lambda: Store(host_of))
    pods: Store = field(default_factory=lambda: Store(host_uid_of, keep=slim_pod))  # by host uid
    secrets: Store = field(default_factory=lambda: Store(keep=slim_secret))  # episodes' lease Secrets
    policies: Store = field(default_factory=lambda: Store(keep=slim_network_policy))  # episodes' egress
    hosts: Store = field(default_factory=Store)
    # Per episode uid: admissions decided and not yet in its status (the planner counts them as holding).
    admissions: dict[str, Admission] = field(default_factory=dict)
    # Per episode uid: the children this process made or checked, by kind, with their digest; a drift
    # found by the drift pass forgets them, so the next reconcile looks again.
    children: dict[str, Made] = field(default_factory=dict)
    later: Later = field(default_factory=Later)
    # Episode uids seen by the watch whose event handler has not run yet (it reconciles them itself).
    arriving: set[str] = field(default_factory=set)
    # What is derived from an object's inputs, per object and the versions of those inputs (kube/memo.py):
    # an episode's verdict and its slot as the planner sees it, a host's verdict, a Ready found to agree.
    memo: Memo = field(default_factory=Memo)
    # RuntimeClass names seen to exist, and when (a missing one is asked for again every time).
    runtime_classes: dict[str, float] = field(default_factory=dict)
    helpers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(
            max_workers=WORKERS, thread_name_prefix="gymsandbox-helper"
        )
    )
    # Warning events, posted on a thread of their own (kube/events.py).
    events: EventPoster = field(default_factory=EventPoster)

    def alongside(self, fn: Callable[[], T]) -> Future[T]:
        """`fn` on a helper thread, in this thread's context, while the caller goes on: two requests that
        neither waits for (an episode's lease Secret and NetworkPolicy) take one round trip, not two. The
        caller waits for the result before it returns, so nothing outlives its reconcile."""
        return self.helpers.submit(contextvars.copy_context().run, fn)

    def watches(self, namespace: str) -> bool:
        """Whether `namespace` is this operator's to handle (its --namespace patterns)."""
        if not self.namespaces:
            return True
        included = [p for p in self.namespaces if not p.startswith("!")]
        excluded = [p[1:] for p in self.namespaces if p.startswith("!")]
        return (not included or any(fnmatch.fnmatchcase(namespace, p) for p in included)) and not any(
            fnmatch.fnmatchcase(namespace, p) for p in excluded
        )

    def due(self, key: str, interval: float) -> bool:
        """True at most once per `interval` seconds for `key` (periodic work inside a faster timer), also
        when several timers ask at once (each host's timer asks for its namespace's drift pass)."""
        with self._due_lock:
            moment = time.monotonic()
            if moment - self._last_run.get(key, float("-inf")) < interval:
                return False
            self._last_run[key] = moment
            return True

    def mark(self, key: str) -> None:
        """Remember that `key` happened now (see `since`)."""
        self._last_run[key] = time.monotonic()

    def since(self, key: str) -> float:
        """Seconds since `key` was marked (or `due` last answered True); infinite if never."""
        return time.monotonic() - self._last_run.get(key, float("-inf"))

    def prune(self, idle_seconds: float = IDLE_SECONDS) -> None:
        """Bound every per-object map by the objects seen in the last `idle_seconds` (each live one is
        reconciled every RESYNC_SECONDS), whether or not their deletion was seen."""
        self.locks.prune(idle_seconds)
        cutoff = time.monotonic() - idle_seconds
        for key in [k for k, moment in self._last_run.items() if moment < cutoff]:
            self._last_run.pop(key, None)
        self.memo.prune(idle_seconds)
        for per_object in (self.lingering, self.children, self.admissions):
            for uid in [u for u in per_object if u not in self.locks]:
                per_object.pop(uid, None)

    def forget_episode(self, uid: str) -> None:
        self.locks.forget(uid)
        self.admissions.pop(uid, None)
        self.children.pop(uid, None)
        self.memo.forget(uid)

    def forget_host(self, uid: str) -> None:
        """Drop what is kept per host once it is gone: the maps stay as large as the live hosts."""
        self.lingering.pop(uid, None)
        self.memo.forget(uid)
        self.plans.forget(uid)
        self.locks.forget(uid)
        self.locks.forget(f"episodes/{uid}")
        for key in [k for k in self._last_run if k.endswith(f"/{uid}")]:
            self._last_run.pop(key, None)
