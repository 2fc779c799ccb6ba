"""One cache for what the engine derives from objects it has seen: each value is kept under its object's uid
and a name for what it is, with the versions of the inputs it was computed from. Asked again with the same
versions, the value comes back without computing; with any other, it is computed again and kept (and, if
asked, a value equal to the one it replaces stays that object, so that callers may compare by identity).

What is kept for an object is dropped with it (`forget`) or, for an object whose deletion was never seen (a
watch gap), once nothing was kept for it for a while (`prune`): the cache stays as large as the objects
handled lately. It replaces the hand-made memo maps the handlers once kept one by one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class Memo:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, tuple[Hashable, Any]]] = {}  # uid -> what -> (versions, value)
        self._used: dict[str, float] = {}  # uid -> when any of its values was last kept
        self._clock = clock

    def get(
        self,
        uid: str,
        what: str,
        versions: Hashable,
        compute: Callable[[], T],
        *,
        same_if_equal: bool = False,
    ) -> T:
        """The value of `what` for the object `uid` at `versions`, computed only when not kept already. With
        `same_if_equal`, a value computed again and equal to the one kept is that very object."""
        kept = self._kept(uid, what)
        if kept is not None and kept[0] == versions:
            return kept[1]  # type: ignore[no-any-return]
        value = compute()
        if same_if_equal and kept is not None and kept[1] == value:
            value = kept[1]
        self._keep(uid, what, versions, value)
        return value

    def agrees(self, uid: str, what: str, versions: Hashable) -> bool:
        """Whether `what` was found to hold for `uid` at exactly these versions (see `agreed`)."""
        kept = self._kept(uid, what)
        return kept is not None and kept[0] == versions

    def agreed(self, uid: str, what: str, versions: Hashable | None) -> None:
        """Record that `what` holds for `uid` at `versions` (None: it does not hold; forget it)."""
        if versions is not None:
            self._keep(uid, what, versions, True)
            return
        with self._lock:
            self._entries.get(uid, {}).pop(what, None)

    def forget(self, uid: str) -> None:
        """Drop every value kept for `uid` (its object is gone)."""
        with self._lock:
            self._used.pop(uid, None)
            self._entries.pop(uid, None)

    def prune(self, idle_seconds: float) -> None:
        """Drop what is kept for objects nothing was kept for in `idle_seconds`."""
        cutoff = self._clock() - idle_seconds
        with self._lock:
            for uid in [uid for uid, used in self._used.items() if used < cutoff]:
                del self._used[uid]
                self._entries.pop(uid, None)

    def __len__(self) -> int:
        """How many objects have values kept."""
        with self._lock:
            return len(self._entries)

    def _kept(self, uid: str, what: str) -> tuple[Hashable, Any] | None:
        # A read takes no lock and no clock (each is a dict lookup, atomic in CPython): a burst plans every
        # episode of a host on each create. Only a write counts as use, so a value read for an hour without
        # ever changing is pruned, and computed once more when next asked.
        return self._entries.get(uid, {}).get(what)

    def _keep(self, uid: str, what: str, versions: Hashable, value: Any) -> None:
        with self._lock:
            self._entries.setdefault(uid, {})[what] = (versions, value)
            self._used[uid] = self._clock()
