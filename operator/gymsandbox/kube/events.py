"""Warning events about the operator's objects (a refusal, a failure), posted on a thread of their own.

Handlers run on the engine's work queue (kube/informer.py); every event goes through an `EventPoster`, so
that posting never holds up a reconcile: the event waits in a bounded queue, and one the API server refuses
or does not take is logged in a line and dropped (the object's status is the record; the event is a
courtesy).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gymsandbox.kube.client import EVENT, Kube, api_outage, api_refusal, namespace_terminating

LOG = logging.getLogger("gymsandbox")
COMPONENT = "gymsandbox-operator"
MESSAGE_CHARS = 1024
# Events beyond this many waiting are dropped, oldest first (an outage with thousands of failures).
QUEUE_LIMIT = 1000


def warning_event(body: Mapping[str, Any], reason: str, message: str, moment: datetime) -> dict[str, Any]:
    """A core/v1 Warning Event about `body`."""
    meta = body.get("metadata") or {}
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": "Warning",
        "reason": reason,
        "message": message[:MESSAGE_CHARS],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventPoster:
    """Posts events handed to it, in order, on one daemon thread started by the first one."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._waiting: deque[tuple[Kube, dict[str, Any]]] = deque(maxlen=limit)
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None

    def warn(self, kube: Kube, body: Mapping[str, Any], reason: str, message: str) -> None:
        event = warning_event(body, reason, message, datetime.now(UTC))
        with self._wakeup:
            self._waiting.append((kube, event))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gymsandbox-events", daemon=True)
                self._thread.start()
            self._wakeup.notify()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._waiting:
                    self._wakeup.wait()
                kube, event = self._waiting.popleft()
            self._post(kube, event)

    @staticmethod
    def _post(kube: Kube, event: dict[str, Any]) -> None:
        try:
            kube.create(EVENT, event)
        except Exception as e:
            why = why_not_posted(e)
            if why is None:
                LOG.error("posting the event %s failed", event["reason"], exc_info=e)
            else:
                level, problem = why
                about = event["involvedObject"]
                LOG.log(
                    level,
                    "the event %s about %s %s/%s was not posted: %s",
                    event["reason"],
                    about["kind"],
                    about["namespace"],
                    about["name"],
                    problem,
                )


def why_not_posted(error: BaseException) -> tuple[int, str] | None:
    """How loudly to log an event the API server did not take, and why; None when the failure is unexpected.
    An event into a namespace being deleted (or gone) is expected: its object goes with it."""
    if isinstance(error, ApiException) and (namespace_terminating(error) or error.status == 404):
        return logging.DEBUG, "its namespace is being deleted"
    problem = api_outage(error) or api_refusal(error)
    return None if problem is None else (logging.WARNING, problem)
