"""The watches (every kind the operator reads), and the work queue they feed.

An `Informer` lists one kind (by label, a page at a time), then watches it from the listing's version, in a
thread of its own: it feeds a Store and hands every event on. The watch is restarted where it stopped when
the API server ends it or goes quiet (stalled), and listed again when that version is gone (410 after a
compaction); a listing that no longer shows an object it held is that object's deletion. A `WorkQueue` runs
the events on worker threads: one key at a time, and the events a key gets while it is being handled are
merged into one.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gymsandbox.desired.owner import Manifest
from gymsandbox.kube.client import Kind, Kube, api_outage, api_refusal
from gymsandbox.kube.later import Later
from gymsandbox.kube.store import Store
from gymsandbox.metrics import METRICS

LOG = logging.getLogger("gymsandbox")
# The API server ends a watch after this long; with no byte for WATCH_IDLE_SECONDS it is taken as stalled.
WATCH_SECONDS = 120
WATCH_IDLE_SECONDS = 150.0
# Between attempts while the API server does not answer.
RETRY_SECONDS = 1.0
# A failed handler's key is handled again after this long, doubled at each failure in a row up to the max.
RETRY_BASE_SECONDS = 2.0
RETRY_MAX_SECONDS = 30.0

Handle = Callable[[str | None, Manifest], None]  # (event type: None for a listing, the object)

# Which event of a key wins when several wait: a deletion over everything, then a listing or creation over
# a change (they reconcile unconditionally), else the later one.
RANK = {"MODIFIED": 0, None: 1, "ADDED": 1, "DELETED": 2}


class WorkQueue:
    """Events by key, handled on `workers` threads: a key by one thread at a time; the events that arrive for
    a key while it waits or is being handled become one (the higher-ranked type, the latest object). A key
    whose handler fails is handled again after a backoff (RETRY_BASE_SECONDS, doubling to RETRY_MAX_SECONDS
    while it keeps failing), unless a newer event of it came meanwhile: one retry policy for every kind."""

    def __init__(self, workers: int, name: str = "events", *, later: Later | None = None) -> None:
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._pending: dict[str, tuple[str | None, Manifest, Handle]] = {}
        self._active: set[str] = set()
        self._failures: dict[str, int] = {}  # consecutive failures per key, while it keeps failing
        self._retries: dict[str, int] = {}  # per key, the ticket of the retry it waits for
        self._tickets = itertools.count()
        self._stopped = False
        self._workers, self._name = workers, name
        self._later = later if later is not None else Later()

    def start(self) -> None:
        for n in range(self._workers):
            threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True).start()

    def stop(self, wait_seconds: float = 0.0) -> None:
        """Take no more work; wait up to `wait_seconds` for the keys being handled to finish."""
        deadline = time.monotonic() + wait_seconds
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            while self._active and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())

    def add(self, key: str, type: str | None, body: Manifest, handle: Handle) -> None:
        with self._cond:
            self._retries.pop(key, None)  # a new event supersedes a failed one's retry
            self._add(key, type, body, handle)

    def _add(self, key: str, type: str | None, body: Manifest, handle: Handle) -> None:
        waiting = self._pending.get(key)
        if waiting is not None and RANK[waiting[0]] > RANK[type]:
            type = waiting[0]
        self._pending[key] = (type, body, handle)
        if waiting is None and key not in self._active:
            self._ready.append(key)
            self._cond.notify()

    def _retry(self, key: str, ticket: int, type: str | None, body: Manifest, handle: Handle) -> None:
        """The failed event again, unless a newer event of the key came since it failed (it carries the
        newer object, and was or will be handled)."""
        with self._cond:
            if self._retries.get(key) == ticket and not self._stopped:
                del self._retries[key]
                self._add(key, type, body, handle)

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    def failing(self) -> int:
        """How many keys failed on their last run (and have not succeeded since)."""
        with self._cond:
            return len(self._failures)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                key = self._ready.popleft()
                type, body, handle = self._pending.pop(key)
                self._active.add(key)
            failed: Exception | None = None
            try:
                handle(type, body)
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug("%s: handled by %s", what(body), handler_name(handle))
            except Exception as e:
                failed = e
            ticket, failures = None, 0
            with self._cond:
                self._active.discard(key)
                if failed is None:
                    self._failures.pop(key, None)
                else:
                    self._failures[key] = failures = self._failures.get(key, 0) + 1
                    if key not in self._pending:  # else a newer event came meanwhile: it is handled next
                        self._retries[key] = ticket = next(self._tickets)
                if key in self._pending:  # an event came while it ran: one idle worker takes it
                    self._ready.append(key)
                    self._cond.notify()
                if self._stopped:  # stop() waits for the keys being handled; else no one waits for this
                    self._cond.notify_all()
            if failed is not None:
                delay = retry_delay(failures)
                log_failure(handle, body, failed, delay)
                if ticket is not None:
                    again = partial(self._retry, key, ticket, type, body, handle)
                    self._later.call(f"retry/{key}", delay, again)


def retry_delay(failures: int) -> float:
    """Seconds before the next try of a key that failed `failures` times in a row."""
    return float(min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (failures - 1)))


def handler_name(handle: Handle) -> str:
    """The handler's function name (through a functools.partial)."""
    return str(getattr(getattr(handle, "func", handle), "__name__", "a handler"))


def what(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{body.get('kind', 'object')} {meta.get('namespace')}/{meta.get('name')}"


def log_failure(handle: Handle, body: Mapping[str, Any], error: Exception, delay: float) -> None:
    """An API outage or refusal is one line; anything else is a bug, with its traceback."""
    outage, refusal = api_outage(error), api_refusal(error)
    if outage or refusal:
        problem = f"did not answer ({outage})" if outage else f"refused: {refusal}"
        LOG.warning("%s: the API server %s; retrying in %.0f s", what(body), problem, delay)
    elif isinstance(error, RetryError):
        LOG.info("%s: %s; retrying in %.0f s", what(body), error, delay)
    else:
        name = handler_name(handle)
        LOG.error("%s: %s failed; retrying in %.0f s", what(body), name, delay, exc_info=error)


class RetryError(Exception):
    """A handler's way to say: not now (an object changed meanwhile), again after the backoff; one line."""


class Informer:
    """One kind's objects matching `labels` in one namespace (None: every namespace), kept in `store`; every
    event is handed to `handle` (after the store has it: the handler reads the store) with the object as
    the store keeps it: a burst's queued events hold no managedFields, and no pod containers. `name` says
    which objects (two informers may watch one kind): its thread is `watch-NAME[@NAMESPACE]`."""

    def __init__(
        self,
        kube: Kube,
        kind: Kind,
        namespace: str | None,
        *,
        name: str,
        labels: str,
        store: Store,
        handle: Handle,
    ) -> None:
        self.kube, self.kind, self.namespace, self.labels = kube, kind, namespace, labels
        self.store, self.handle = store, handle
        self.version = ""
        self._stopped = threading.Event()
        thread = f"watch-{name}" + (f"@{namespace}" if namespace else "")
        self._thread = threading.Thread(target=self._run, name=thread, daemon=True)

    def list(self) -> None:
        """List, hand on every object listed (type None) and the deletion of every object held that the
        listing no longer shows."""
        started = time.monotonic()
        listed: dict[tuple[str, str], str] = {}
        version = ""
        for page in self.kube.listing(self.kind, self.namespace, labels=self.labels):
            version = str((page.get("metadata") or {}).get("resourceVersion") or version)
            for item in page.get("items") or []:
                meta = item["metadata"]
                listed[(meta["namespace"], meta["name"])] = meta["uid"]
                self.handle(None, self.store.keep(item))
        for held in self.store.in_namespace(self.namespace):
            meta = held["metadata"]
            namespace, name = meta.get("namespace") or "", meta["name"]
            age = self.store.age(namespace, name)
            if (
                listed.get((namespace, name)) != meta.get("uid")
                and age is not None
                and age > (time.monotonic() - started)
            ):
                self.handle("DELETED", held)  # put before the listing began, and not in it: deleted unseen
        self.version = version

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        failing = False
        while not self._stopped.is_set():
            try:
                if not self.version:
                    self.list()
                self._watch()
                failing = False
            except ApiException as e:
                if e.status == 410:
                    METRICS.watch_restarts.labels("expired").inc()
                    LOG.info("the watch of %s expired (410 Gone): listing them again", self.kind.plural)
                    self.version = ""
                    continue
                failing = self._failed(e, failing)
            except urllib3.exceptions.ReadTimeoutError:
                METRICS.watch_restarts.labels("inactive").inc()
            except Exception as e:
                failing = self._failed(e, failing)

    def _watch(self) -> None:
        for event in self.kube.watch(
            self.kind,
            self.namespace,
            labels=self.labels,
            resource_version=self.version,
            server_timeout=WATCH_SECONDS,
            client_timeout=WATCH_IDLE_SECONDS,
        ):
            if self._stopped.is_set():
                return
            body = event.get("object") or {}
            self.version = str((body.get("metadata") or {}).get("resourceVersion") or self.version)
            if event.get("type") != "BOOKMARK":
                self.handle(event.get("type"), self.store.keep(body))

    def _failed(self, error: Exception, failing: bool) -> bool:
        """One line when a run of failures begins, then a retry every RETRY_SECONDS; a bug's traceback."""
        problem = api_outage(error) or api_refusal(error)
        if problem is None:
            LOG.error("the watch of %s failed", self.kind.plural, exc_info=error)
        elif not failing:
            LOG.warning("the watch of %s failed (%s); retrying", self.kind.plural, problem)
        self._stopped.wait(RETRY_SECONDS)
        return True
