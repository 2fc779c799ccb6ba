"""Calls made a little later, on a thread of their own: deferred reconciles, and the work queue's retries."""

from __future__ import annotations

import contextvars
import heapq
import logging
import math
import threading
import time
from collections.abc import Callable

LOG = logging.getLogger("gymsandbox")


class Later:
    """Calls made a little later, on one thread: at most one pending per key (the earliest wins). Each runs
    in the context it was asked from. The calls wait in a heap (a key asked again for sooner leaves its
    older entry behind, skipped when it comes up), and the thread is woken only by a call due before it
    would wake anyway: a burst of thousands of deferred reconciles costs a log-time push each, not a scan of
    every pending call."""

    def __init__(self) -> None:
        self._wakeup = threading.Condition()
        self._pending: dict[str, tuple[float, Callable[[], None], contextvars.Context]] = {}
        self._heap: list[tuple[float, str]] = []
        self._sleeping_until = math.inf  # when the thread wakes on its own; inf while it is not waiting
        self._thread: threading.Thread | None = None

    def call(self, key: str, delay: float, fn: Callable[[], None]) -> None:
        with self._wakeup:
            when = time.monotonic() + delay
            if key in self._pending and self._pending[key][0] <= when:
                return
            self._pending[key] = (when, fn, contextvars.copy_context())
            heapq.heappush(self._heap, (when, key))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gymsandbox-later", daemon=True)
                self._thread.start()
            if when < self._sleeping_until:
                self._wakeup.notify()

    def _due(self, moment: float) -> list[tuple[Callable[[], None], contextvars.Context]]:
        """Take the calls due at `moment` off the heap (under the lock)."""
        calls = []
        while self._heap and self._heap[0][0] <= moment:
            when, key = heapq.heappop(self._heap)
            pending = self._pending.get(key)
            if pending is not None and pending[0] == when:  # else superseded by a sooner call of the key
                del self._pending[key]
                calls.append(pending[1:])
        return calls

    def _run(self) -> None:
        while True:
            with self._wakeup:
                moment = time.monotonic()
                calls = self._due(moment)
                if not calls:
                    self._sleeping_until = self._heap[0][0] if self._heap else moment + 60
                    self._wakeup.wait(timeout=self._sleeping_until - moment)
                    self._sleeping_until = math.inf
                    continue
            for fn, context in calls:
                try:
                    context.run(fn)
                except Exception:  # the periodic passes repair what a deferred call missed
                    LOG.exception("a deferred reconcile failed")
