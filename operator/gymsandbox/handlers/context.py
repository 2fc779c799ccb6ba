"""What every handler shares, kept in kopf's memo: the cluster policy, the API access, the signing key."""

from __future__ import annotations

import fnmatch
import os
import threading
import time
from dataclasses import dataclass, field

from gymsandbox.handlers.kube import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import BoundedResolver, Resolver

# How often every object is reconciled even without events: drift repair and DNS re-resolution.
RESYNC_SECONDS = float(os.environ.get("GYMSANDBOX_RESYNC_SECONDS", "10"))
# Seconds before kopf retries a failed handler or timer (its own default is 60).
ERROR_BACKOFF_SECONDS = 2.0
# What is kept per object is dropped after this long without a reconcile of it (OperatorContext.prune).
IDLE_SECONDS = 3600.0
PRUNE_SECONDS = 300.0


class KeyedLocks:
    """One lock per key (an object's uid): reconciles of the same object never overlap across the create
    handler, the timer and child events, which kopf runs in parallel threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._used: dict[str, float] = {}

    def __call__(self, key: str) -> threading.Lock:
        with self._guard:
            self._used[key] = time.monotonic()
            return self._locks.setdefault(key, threading.Lock())

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


@dataclass(frozen=True)
class OperatorContext:
    policy: ClusterPolicy
    kube: Kube
    signing_key: SigningKey
    # kopf namespace patterns this operator serves (globs, "!" excludes); empty: every namespace.
    namespaces: tuple[str, ...] = ()
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    resolver: Resolver = field(default_factory=BoundedResolver)
    _last_run: dict[str, float] = field(default_factory=dict)
    # Per host uid: sandbox pods still running without an open episode at the last look (each holds a slot).
    lingering: dict[str, int] = field(default_factory=dict)

    def watches(self, namespace: str) -> bool:
        """Whether `namespace` is this operator's to handle, as kopf matches its --namespace patterns."""
        if not self.namespaces:
            return True
        included = [p for p in self.namespaces if not p.startswith("!")]
        excluded = [p[1:] for p in self.namespaces if p.startswith("!")]
        return (not included or any(fnmatch.fnmatchcase(namespace, p) for p in included)) and not any(
            fnmatch.fnmatchcase(namespace, p) for p in excluded
        )

    def due(self, key: str, interval: float) -> bool:
        """True at most once per `interval` seconds for `key` (periodic work inside a faster timer)."""
        moment = time.monotonic()
        if moment - self._last_run.get(key, float("-inf")) < interval:
            return False
        self._last_run[key] = moment
        return True

    def prune(self, idle_seconds: float = IDLE_SECONDS) -> None:
        """Bound every per-object map by the objects seen in the last `idle_seconds` (each live one is
        reconciled every RESYNC_SECONDS), whether or not their deletion was seen."""
        self.locks.prune(idle_seconds)
        cutoff = time.monotonic() - idle_seconds
        for key in [k for k, moment in self._last_run.items() if moment < cutoff]:
            self._last_run.pop(key, None)
        for uid in [u for u in self.lingering if u not in self.locks]:
            self.lingering.pop(uid, None)

    def forget_host(self, uid: str) -> None:
        """Drop what is kept per host once it is gone: the maps stay as large as the live hosts."""
        self.lingering.pop(uid, None)
        self.locks.forget(uid)
        self.locks.forget(f"episodes/{uid}")
        for key in [k for k in self._last_run if k.endswith(f"/{uid}")]:
            self._last_run.pop(key, None)
