"""The operator's Prometheus metrics (`--metrics-listen`).

Labels stay bounded: namespaces (the ones this operator serves), phases, failure kinds and reasons (enums),
API verbs and resource plurals, handler names. Never an object's name or uid, and never a Secret: nothing
here reads a body. Phase gauges are counted from the listings the handlers already make (each host's
episodes every REAP_SECONDS, each host at its reconcile), so a scrape costs no API call.

Latencies run from an object's creation; one created while the operator was down counts that wait too.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from prometheus_client import (
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# No `_created` twin of every counter and histogram: it doubles the series and no panel reads it. (Global to
# the process: the broker's registry, served through serve_metrics below, goes without them too.)
disable_created_metrics()  # type: ignore[no-untyped-call]

EPISODE_PHASES = ("queued", "admitted", "ready", "failed")
HOST_PHASES = ("pending", "ready", "failed")
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300)
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

P = ParamSpec("P")
R = TypeVar("R")


def episode_phase(episode: Mapping[str, Any]) -> str:
    """Where an episode stands by its stored status: failed (a failure recorded, refusals included), ready,
    admitted (holding a slot, not ready yet) or queued (waiting for a slot or for its first reconcile)."""
    status = episode.get("status") or {}
    if status.get("failure"):
        return "failed"
    if _ready(status):
        return "ready"
    return "admitted" if status.get("admittedAt") else "queued"


def host_phase(status: Mapping[str, Any]) -> str:
    """failed (a failure recorded, refusals included), ready, or pending (on its way to Ready)."""
    if status.get("failure"):
        return "failed"
    return "ready" if _ready(status) else "pending"


def _ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


class _Phases(Collector):
    """Objects by namespace and phase, summed at scrape time over what each host last reported."""

    def __init__(self, name: str, documentation: str, phases: tuple[str, ...]) -> None:
        self.name, self.documentation, self.phases = name, documentation, phases
        self._lock = threading.Lock()
        self._by_source: dict[str, tuple[str, Tally[str]]] = {}
        self._reported: dict[str, float] = {}

    def set(self, source: str, namespace: str, tally: Tally[str]) -> None:
        with self._lock:
            self._by_source[source] = (namespace, tally)
            self._reported[source] = time.monotonic()

    def forget(self, source: str) -> None:
        with self._lock:
            self._by_source.pop(source, None)
            self._reported.pop(source, None)

    def prune(self, idle_seconds: float) -> None:
        """Forget hosts that reported nothing for `idle_seconds` (gone, their deletion unseen)."""
        cutoff = time.monotonic() - idle_seconds
        with self._lock:
            for source in [s for s, moment in self._reported.items() if moment < cutoff]:
                self._by_source.pop(source, None)
                del self._reported[source]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=["namespace", "phase"])
        totals: dict[str, Tally[str]] = {}
        with self._lock:
            for namespace, tally in self._by_source.values():
                totals.setdefault(namespace, Tally()).update(tally)
        for namespace, tally in sorted(totals.items()):
            for phase in self.phases:
                family.add_metric([namespace, phase], tally.get(phase, 0))
        yield family


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        registry.register(PROCESS_COLLECTOR)
        registry.register(PLATFORM_COLLECTOR)
        self.episodes = _Phases(
            "gymsandbox_episodes", "EpisodeSandboxes by namespace and phase", EPISODE_PHASES
        )
        self.hosts = _Phases("gymsandbox_gymhosts", "GymHosts by namespace and phase", HOST_PHASES)
        registry.register(self.episodes)
        registry.register(self.hosts)
        self.admission_seconds = Histogram(
            "gymsandbox_episode_admission_seconds",
            "From an episode's creation to its admission (a concurrency slot)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_wait_seconds = Histogram(
            "gymsandbox_episode_queue_wait_seconds",
            "From creation to admission, for episodes that waited in their host's queue",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ready_seconds = Histogram(
            "gymsandbox_ready_seconds",
            "From an object's creation to its first Ready=True",
            ["resource"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.reaps = Counter(
            "gymsandbox_reaps",
            "Objects deleted by the operator, by reason",
            ["resource", "reason"],
            registry=registry,
        )
        self.reap_lag_seconds = Histogram(
            "gymsandbox_reap_lag_seconds",
            "How long after its expiresAt an expired object was deleted",
            ["resource"],
            buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300),
            registry=registry,
        )
        self.failures = Counter(
            "gymsandbox_failures",
            "Transitions into a failure (refusals included), by kind and reason",
            ["resource", "kind", "reason"],
            registry=registry,
        )
        self.api_requests = Counter(
            "gymsandbox_api_requests",
            "Kubernetes API requests by verb, resource and HTTP status (error: no response)",
            ["verb", "resource", "code"],
            registry=registry,
        )
        self.api_seconds = Histogram(
            "gymsandbox_api_request_duration_seconds",
            "Kubernetes API request latency by verb and resource",
            ["verb", "resource"],
            buckets=API_BUCKETS,
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "gymsandbox_reconcile_duration_seconds",
            "Handler and timer run time, by handler",
            ["handler"],
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "gymsandbox_reconcile_errors",
            "Handler runs that raised (the work queue retries them)",
            ["handler"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "gymsandbox_reconciles_in_flight",
            "Handler runs in progress, by handler: near the worker count means a backlog",
            ["handler"],
            registry=registry,
        )
        self.watch_restarts = Counter(
            "gymsandbox_watch_restarts",
            "Watch streams restarted: expired (410 Gone) or inactive (no event within its timeout)",
            ["cause"],
            registry=registry,
        )
        self._started: dict[str, float] = {}
        self._started_lock = threading.Lock()

    # --- latencies -------------------------------------------------------------------------------------

    def created(self, uid: str, creation_timestamp: str) -> None:
        """The operator sees a new object: its latencies start at its creation. creationTimestamp has whole
        seconds; seen within half a second of it, the moment seen is nearer the truth."""
        created = datetime.fromisoformat(creation_timestamp.replace("Z", "+00:00")).timestamp()
        with self._started_lock:
            self._started.setdefault(uid, min(time.time(), created + 0.5))

    def admitted(self, uid: str, *, waited: bool) -> None:
        with self._started_lock:
            started = self._started.get(uid)
        if started is not None:
            elapsed = time.time() - started
            self.admission_seconds.observe(elapsed)
            if waited:
                self.queue_wait_seconds.observe(elapsed)

    def ready(self, resource: str, uid: str) -> None:
        """Ready=True for the first time since creation (later flaps are not latencies)."""
        with self._started_lock:
            started = self._started.pop(uid, None)
        if started is not None:
            self.ready_seconds.labels(resource).observe(time.time() - started)

    def failed(self, resource: str, uid: str, kind: str, reason: str) -> None:
        self.forget(uid)
        self.failures.labels(resource, kind, reason).inc()

    def forget(self, uid: str) -> None:
        with self._started_lock:
            self._started.pop(uid, None)

    def prune(self, idle_seconds: float, started_seconds: float) -> None:
        """Forget hosts silent for `idle_seconds`, and the start times of objects created over
        `started_seconds` ago that were never Ready nor seen deleted."""
        self.hosts.prune(idle_seconds)
        self.episodes.prune(idle_seconds)
        cutoff = time.time() - started_seconds
        with self._started_lock:
            for uid in [u for u, started in self._started.items() if started < cutoff]:
                del self._started[uid]

    def forget_host(self, uid: str) -> None:
        """A host released: neither it nor its episodes count any more."""
        self.hosts.forget(uid)
        self.episodes.forget(uid)
        self.forget(uid)

    def reaped(self, resource: str, reason: str, lag_seconds: float) -> None:
        self.reaps.labels(resource, reason).inc()
        self.reap_lag_seconds.labels(resource).observe(max(lag_seconds, 0.0))

    # --- API and handlers ------------------------------------------------------------------------------

    def api_request(self, verb: str, resource: str, code: str, seconds: float) -> None:
        self.api_requests.labels(verb, resource, code).inc()
        self.api_seconds.labels(verb, resource).observe(seconds)

    def timed(self, handler: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Time a handler, count its errors and runs in flight. functools.wraps keeps its name, which the
        work queue's log lines use."""

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            @functools.wraps(fn)
            def run(*args: P.args, **kwargs: P.kwargs) -> R:
                started = time.monotonic()
                self.in_flight.labels(handler).inc()
                try:
                    return fn(*args, **kwargs)
                except Exception:
                    self.reconcile_errors.labels(handler).inc()
                    raise
                finally:
                    self.in_flight.labels(handler).dec()
                    self.reconcile_seconds.labels(handler).observe(time.monotonic() - started)

            return run

        return decorate


METRICS = OperatorMetrics()


class MetricsListenError(Exception):
    """The metrics port cannot be served (taken, or an address this machine does not have)."""


def serve_metrics(registry: CollectorRegistry, listen: tuple[str, int]) -> None:
    """Serve the registry's /metrics on (address, port), in a daemon thread."""
    try:
        start_http_server(listen[1], addr=listen[0], registry=registry)
    except OSError as e:
        raise MetricsListenError(f"cannot serve metrics on {listen[0]}:{listen[1]}: {e.strerror}") from None
