"""Objects the broker read a moment ago, shared by the calls in flight.

A burst of calls on one episode (hundreds of execs of a GRPO step) would otherwise read its host, the
episode and its pod from the API server once per call. Here a read is kept for `seconds` (by default 1 s)
and concurrent misses of one object share one GET. The rules that keep this safe:
- a cached read may let a call through, never refuse one: callers re-read with `fresh=True` before any
  refusal (a token's object gone or replaced, an episode not Ready, a pod not its sandbox);
- the broker's own writes replace or drop what is kept, so a close, a renewal or a revocation through this
  replica counts at once; a change made elsewhere (another replica, the operator, kubectl) is seen within
  `seconds`;
- a token is still verified against the object's uid on every call: a cached object of a recreated
  namesake refuses, and the fresh re-read then finds the new one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from typing import cast

from gymsandbox.desired.owner import Manifest
from gymsandbox.kube.store import slim

KEEP_SECONDS = 1.0
MOST_KEPT = 8192  # objects; past it the expired ones are dropped, then the oldest
_UNKNOWN = object()  # forgotten: the next read fetches, and no answer fetched before then is kept


class Recent:
    def __init__(self, seconds: float = KEEP_SECONDS, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self._kept: dict[Hashable, tuple[float, object]] = {}  # key -> (since when, object, None or _UNKNOWN)
        self._flights: dict[Hashable, Future[Manifest | None]] = {}
        self._lock = threading.Lock()
        self._swept = clock()

    def read(
        self, key: Hashable, fetch: Callable[[], Manifest | None], *, fresh: bool = False
    ) -> Manifest | None:
        """The object under `key`: as kept if read under `seconds` ago (unless `fresh`), else from `fetch`;
        concurrent misses share one fetch."""
        if self.seconds <= 0:
            return fetch()
        with self._lock:
            kept = self._kept.get(key)
            if (
                not fresh
                and kept is not None
                and kept[1] is not _UNKNOWN
                and self.clock() - kept[0] < self.seconds
            ):
                return cast(Manifest | None, kept[1])
            shared = None if fresh else self._flights.get(key)
            if shared is None:
                mine: Future[Manifest | None] = Future()
                if not fresh:
                    self._flights[key] = mine
        if shared is not None:
            return shared.result()
        started = self.clock()
        try:
            value = fetch()
        except BaseException as e:
            self._land(key, mine)
            mine.set_exception(e)
            raise
        self._land(key, mine, started, value)
        mine.set_result(value)
        return value

    def put(self, key: Hashable, value: Manifest | None) -> None:
        """The object as the broker's own write answered it (None: deleted)."""
        with self._lock:
            self._keep(key, self.clock(), value)

    def forget(self, key: Hashable) -> None:
        """Read it afresh next time (after a write whose answer does not show the object as it now is)."""
        with self._lock:
            self._keep(key, self.clock(), _UNKNOWN)

    def _land(
        self, key: Hashable, flight: Future[Manifest | None], started: float = 0.0, value: object = _UNKNOWN
    ) -> None:
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
            kept = self._kept.get(key)
            # A put or forget since this fetch began knows better than its answer.
            if value is not _UNKNOWN and (kept is None or kept[0] <= started):
                self._keep(key, started, value)

    def _keep(self, key: Hashable, at: float, value: object) -> None:
        """Keep `value` (without its managedFields, which nobody here reads); drop what has expired, at
        most once per `seconds`, so only objects read in the last moments stay in memory."""
        self._kept[key] = (at, slim(value) if isinstance(value, Mapping) else value)
        now = self.clock()
        if now - self._swept >= self.seconds or len(self._kept) > MOST_KEPT:
            self._swept = now
            for old in [k for k, (t, _) in self._kept.items() if now - t >= self.seconds]:
                del self._kept[old]
            while len(self._kept) > MOST_KEPT:
                del self._kept[next(iter(self._kept))]

    def __len__(self) -> int:
        return len(self._kept)
