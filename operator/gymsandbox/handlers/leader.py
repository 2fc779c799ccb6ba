"""Active/standby: of the operators started for one scope (the same namespace patterns, in one operator
namespace) one acts, through a coordination.k8s.io Lease; the others wait, and one of them takes over once
the holder has not renewed it for LEASE_SECONDS (killed, its node lost, its API connection stalled).

A candidate judges a holder by its own clock: it takes over once the Lease it reads has stayed unchanged for
the holder's leaseDurationSeconds since it first read it (clocks of different machines are never compared).
The holder stops writing (`fence`) once it has not renewed for RENEW_DEADLINE_SECONDS, shorter than the
lease, so the old and the new holder never write at once: while the API server is out of reach for everyone
nobody can take over, and the holder renews again once it answers; if another instance took the Lease
meanwhile, the old holder exits (a Deployment starts it again, as a standby).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.kube.client import Kind, Kube, api_outage, api_refusal

LEASE = Kind("coordination.k8s.io/v1", "leases")
LEASE_SECONDS = 10  # a holder not heard of for this long is taken over
RENEW_DEADLINE_SECONDS = 7  # the holder stops writing once it has not renewed for this long
RETRY_SECONDS = 2.0  # how often the holder renews and a candidate looks
# A request of the election's that hangs (a half-open connection) is given up after this long, so that the
# holder learns within seconds that another instance took over once the API server answers again.
ELECTION_REQUEST_SECONDS = 5.0
LOG = logging.getLogger("gymsandbox")

Decision = Literal["create", "renew", "take", "wait"]


def lease_name(namespaces: Sequence[str]) -> str:
    """One Lease per scope: instances watching the same namespace patterns contend for it."""
    scope = ",".join(sorted(namespaces)) or "*"
    return f"gymsandbox-operator-{hashlib.sha256(scope.encode()).hexdigest()[:10]}"


def instance_identity() -> str:
    """This process, unique among its peers (a pod's hostname is its name; tests run several on one host)."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


def holder_of(lease: Mapping[str, Any] | None) -> str | None:
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    return holder if isinstance(holder, str) and holder else None


def decide(lease: Mapping[str, Any] | None, me: str, unchanged_for: float) -> Decision:
    """What a candidate does with the Lease as read, unchanged for `unchanged_for` s by its own clock."""
    if lease is None:
        return "create"
    holder = holder_of(lease)
    if holder == me:
        return "renew"
    if holder is None:
        return "take"  # released by a holder that stopped in order
    duration = (lease.get("spec") or {}).get("leaseDurationSeconds") or LEASE_SECONDS
    return "take" if unchanged_for >= duration else "wait"


def micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElection:
    """One candidate for one Lease. `kube` is its own client, apart from the operator's: a burst that fills
    the operator's connection pool must not delay a renewal, and the election's writes are never fenced."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self._clock, self._wall = clock, wall
        self._seen: tuple[Any, ...] | None = None  # the Lease's (holder, renewTime, transitions) last read
        self._seen_since = 0.0  # when that version was first read
        self._renewed_at: float | None = None  # when the last successful renewal was sent
        self._led = False
        self.other: str | None = None  # another holder, as last read
        self._stop = threading.Event()

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def leading(self) -> bool:
        return self._renewed_at is not None and self._clock() - self._renewed_at < RENEW_DEADLINE_SECONDS

    def fence(self) -> str | None:
        """Why this instance may not write now (None: it leads); asked before every write of the operator."""
        if self.leading():
            return None
        return f"not leading: {self.where} is not renewed"

    def step(self) -> bool:
        """Read the Lease once and act on it; True while this instance leads."""
        sent = self._clock()
        lease = self.kube.get(LEASE, self.namespace, self.name)
        spec = (lease or {}).get("spec") or {}
        version = (holder_of(lease), spec.get("renewTime"), spec.get("leaseTransitions"))
        if version != self._seen:
            self._seen, self._seen_since = version, sent
        self.other = holder_of(lease) if holder_of(lease) != self.identity else None
        decision = decide(lease, self.identity, sent - self._seen_since)
        if decision == "wait":
            return False
        try:
            if decision == "create":
                self.kube.create(LEASE, self._manifest(None))
            else:
                self.kube.replace(LEASE, self._manifest(lease))
        except ApiException as e:
            if e.status in (404, 409):  # another candidate moved first: read again next time
                return False
            raise
        self._renewed_at, self._led, self.other = sent, True, None
        return True

    def _manifest(self, lease: Mapping[str, Any] | None) -> dict[str, Any]:
        spec = dict((lease or {}).get("spec") or {})
        now = micro_time(self._wall())
        if holder_of(lease) != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=LEASE_SECONDS, renewTime=now)
        meta = dict((lease or {}).get("metadata") or {})
        meta.update(name=self.name, namespace=self.namespace)
        meta["labels"] = {**(meta.get("labels") or {}), LABEL_MANAGED_BY: MANAGED_BY}
        return {"apiVersion": LEASE.api_version, "kind": "Lease", "metadata": meta, "spec": spec}

    def acquire(self, until: threading.Event | None = None) -> None:
        """Wait until this instance leads (or `until` is set: a signal to stop while waiting)."""
        said: str | None = None
        until = until or threading.Event()
        while not self._stop.is_set() and not until.is_set():
            try:
                if self.step():
                    LOG.info("gymsandbox operator leading (%s, as %s)", self.where, self.identity)
                    return
                if self.other and self.other != said:
                    LOG.info(
                        "gymsandbox operator waiting: %s leads %s; this instance takes over once it stops"
                        " renewing for %d s",
                        self.other,
                        self.where,
                        LEASE_SECONDS,
                    )
                    said = self.other
            except Exception as e:  # the API server out of reach or refusing: look again
                LOG.warning("gymsandbox operator cannot read %s: %s", self.where, _words(e))
            until.wait(RETRY_SECONDS)

    def keep(self, on_lost: Callable[[str], None]) -> threading.Thread:
        """Renew every RETRY_SECONDS on a thread of its own; `on_lost(holder)` once another one holds it."""

        def renew() -> None:
            unreachable = False
            while not self._stop.wait(RETRY_SECONDS):
                try:
                    if self.step():
                        if unreachable:
                            LOG.info("gymsandbox operator renewed %s again: writes resume", self.where)
                        unreachable = False
                        continue
                    if self.other is not None:
                        on_lost(self.other)
                        return
                except Exception as e:
                    if not unreachable:
                        LOG.warning(
                            "gymsandbox operator cannot renew %s (%s): its writes stop %d s after the last"
                            " renewal, until it renews again",
                            self.where,
                            _words(e),
                            RENEW_DEADLINE_SECONDS,
                        )
                    unreachable = True

        thread = threading.Thread(target=renew, name="gymsandbox-leader", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Stop renewing and, if this instance holds the Lease, hand it over at once (a stop in order)."""
        self._stop.set()
        self._renewed_at = None  # fenced from now on: a handler still running writes nothing more
        if not self._led:
            return
        try:
            lease = self.kube.get(LEASE, self.namespace, self.name)
            if holder_of(lease) == self.identity and lease is not None:
                spec = {**(lease.get("spec") or {}), "holderIdentity": None, "leaseDurationSeconds": 1}
                self.kube.replace(LEASE, {**lease, "spec": spec})
        except Exception as e:  # a standby takes over once the lease runs out
            LOG.warning("gymsandbox operator could not release %s: %s", self.where, _words(e))


def _words(error: BaseException) -> str:
    return api_outage(error) or api_refusal(error) or f"{type(error).__name__}: {error}"
