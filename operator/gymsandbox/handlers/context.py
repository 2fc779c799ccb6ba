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


class KeyedLocks:
    """One lock per key (an object's uid): reconciles of the same object never overlap across the create
    handler, the timer and child events, which kopf runs in parallel threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def __call__(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def forget(self, key: str) -> None:
        with self._guard:
            self._locks.pop(key, None)


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

    def forget_host(self, uid: str) -> None:
        """Drop what is kept per host once it is gone: the maps stay as large as the live hosts."""
        self.lingering.pop(uid, None)
        self.locks.forget(uid)
        self.locks.forget(f"episodes/{uid}")
        for key in [k for k in self._last_run if k.endswith(f"/{uid}")]:
            self._last_run.pop(key, None)
