"""The watches kept off kopf (episodes and the operator's children), and the work queue they feed.

kopf spends about 1.7 ms of its event loop on every event of every object it watches (its indexes, its cause
detection, a task per object), and keeps a backlog of whole events per object: in a burst of episodes that
was half of the operator's CPU, which the API server then lacks. An `Informer` lists one kind (by label, a
page at a time), then watches it from the listing's version, in a thread of its own: it feeds a Store and
hands every event on. The watch is restarted where it stopped when the API server ends it or goes quiet
(stalled), and listed again when that version is gone (410 after a compaction); a listing that no longer
shows an object it held is that object's deletion. A `WorkQueue` runs the events on worker threads: one key
at a time, and the events a key gets while it is being handled are merged into one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gymsandbox.desired.owner import Manifest
from gymsandbox.kube.client import Kind, Kube, api_outage, api_refusal
from gymsandbox.kube.store import Store
from gymsandbox.metrics import METRICS

LOG = logging.getLogger("gymsandbox")
# The API server ends a watch after this long; with no byte for WATCH_IDLE_SECONDS it is taken as stalled.
WATCH_SECONDS = 120
WATCH_IDLE_SECONDS = 150.0
# Between attempts while the API server does not answer.
RETRY_SECONDS = 1.0

Handle = Callable[[str | None, Manifest], None]  # (event type: None for a listing, the object)

# Which event of a key wins when several wait: a deletion over everything, then a listing or creation over
# a change (they reconcile unconditionally), else the later one.
RANK = {"MODIFIED": 0, None: 1, "ADDED": 1, "DELETED": 2}


class WorkQueue:
    """Events by key, handled on `workers` threads: a key by one thread at a time; the events that arrive for
    a key while it waits or is being handled become one (the higher-ranked type, the latest object)."""

    def __init__(self, workers: int, name: str = "events") -> None:
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._pending: dict[str, tuple[str | None, Manifest, Handle]] = {}
        self._active: set[str] = set()
        self._stopped = False
        self._workers, self._name = workers, name

    def start(self) -> None:
        for n in range(self._workers):
            threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True).start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def add(self, key: str, type: str | None, body: Manifest, handle: Handle) -> None:
        with self._cond:
            waiting = self._pending.get(key)
            if waiting is not None and RANK[waiting[0]] > RANK[type]:
                type = waiting[0]
            self._pending[key] = (type, body, handle)
            if waiting is None and key not in self._active:
                self._ready.append(key)
                self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

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
            try:
                handle(type, body)
            except Exception as e:
                log_failure(handle, body, e)
            finally:
                with self._cond:
                    self._active.discard(key)
                    if key in self._pending:
                        self._ready.append(key)
                        self._cond.notify()


def log_failure(handle: Handle, body: Mapping[str, Any], error: Exception) -> None:
    """An API outage or refusal is one line (the periodic passes repair what the event missed); anything
    else is a bug, with its traceback."""
    meta = body.get("metadata") or {}
    what = f"{body.get('kind', 'object')} {meta.get('namespace')}/{meta.get('name')}"
    outage, refusal = api_outage(error), api_refusal(error)
    if outage or refusal:
        problem = f"did not answer ({outage})" if outage else f"refused: {refusal}"
        LOG.warning("%s: the API server %s; the next pass repairs what this event missed", what, problem)
    else:
        LOG.error("%s: %s failed", what, getattr(handle, "__name__", "handler"), exc_info=error)


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
