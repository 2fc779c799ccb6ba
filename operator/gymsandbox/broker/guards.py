"""What keeps one host from harming the others through the broker: its share of calls and memory in flight,
and the only pod it may exec into for an episode."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from gymsandbox.api.names import LABEL_COMPONENT
from gymsandbox.broker.auth import Caller
from gymsandbox.broker.errors import BrokerError
from gymsandbox.desired.labels import COMPONENT_EPISODE


@dataclass
class _Held:
    calls: int = 0
    bytes: int = 0


class HostShares:
    """What one host may hold of the broker at once: at most `calls` commands and transfers in flight, and
    at most `host_bytes` of memory for their input and output; all hosts together at most `total_bytes`. A
    call reserves its worst case (the body it is about to read, the output caps it asks for) before it reads
    anything, and is refused with 429 at once past any share, so one host flooding the broker cannot take
    its threads, its API connections or its memory from the others. Only hosts holding something are kept.
    """

    def __init__(self, calls: int, host_bytes: int, total_bytes: int) -> None:
        self.calls, self.host_bytes, self.total_bytes = calls, host_bytes, total_bytes
        self._held: dict[tuple[str, str], _Held] = {}
        self._total_bytes = 0

    @property
    def reserved_bytes(self) -> int:
        return self._total_bytes

    def call(self, caller: Caller, reserve: int = 0) -> contextlib.AbstractAsyncContextManager[None]:
        """One command or transfer in flight, holding `reserve` bytes."""
        return self._hold(caller, 1, reserve)

    def memory(self, caller: Caller, reserve: int) -> contextlib.AbstractAsyncContextManager[None]:
        """`reserve` bytes for a call already counted (an upload's body, held while it is moved)."""
        return self._hold(caller, 0, reserve)

    @contextlib.asynccontextmanager
    async def _hold(self, caller: Caller, calls: int, reserve: int) -> AsyncIterator[None]:
        key = (caller.namespace, caller.host_name())
        held = self._held.setdefault(key, _Held())
        try:
            self._check(held, calls, reserve)
        except BrokerError:
            self._forget_if_idle(key)
            raise
        held.calls += calls
        held.bytes += reserve
        self._total_bytes += reserve
        try:
            yield
        finally:
            held.calls -= calls
            held.bytes -= reserve
            self._total_bytes -= reserve
            self._forget_if_idle(key)

    def _check(self, held: _Held, calls: int, reserve: int) -> None:
        if calls and held.calls >= self.calls:
            raise BrokerError(
                "quota_exceeded",
                f"the host has {held.calls} commands and transfers in flight, the cap; retry when one ends",
                retry_after=1,
            )
        if held.bytes + reserve > self.host_bytes:
            raise BrokerError(
                "quota_exceeded",
                f"the host's calls in flight hold {held.bytes} bytes of the broker's memory and this one"
                f" needs {reserve} more, past the host's share of {self.host_bytes}; retry when one ends, or"
                " ask for less (maxOutputBytes, smaller transfers)",
                retry_after=1,
            )
        if self._total_bytes + reserve > self.total_bytes:
            raise BrokerError(
                "quota_exceeded",
                f"the broker's memory for calls in flight ({self.total_bytes} bytes) is taken; retry shortly",
                retry_after=1,
            )

    def _forget_if_idle(self, key: tuple[str, str]) -> None:
        held = self._held.get(key)
        if held is not None and held.calls == 0 and held.bytes == 0:
            del self._held[key]


def not_its_sandbox(pod: Mapping[str, Any] | None, episode: Mapping[str, Any]) -> str | None:
    """Why `pod` is not `episode`'s sandbox pod (None when it is): it must exist under the name the operator
    gives it, be controlled by this episode (its uid, not a namesake's) and be labelled a sandbox pod."""
    if pod is None:
        return "its pod does not exist"
    meta, status = pod["metadata"], episode.get("status") or {}
    if status.get("podName") != meta["name"]:
        return f"its status names pod {status.get('podName')}, not {meta['name']}"
    uid = episode["metadata"]["uid"]
    if not any(
        r.get("kind") == "EpisodeSandbox" and r.get("uid") == uid and r.get("controller")
        for r in meta.get("ownerReferences") or []
    ):
        return f"pod {meta['name']} is not controlled by this episode"
    if (meta.get("labels") or {}).get(LABEL_COMPONENT) != COMPONENT_EPISODE:
        return f"pod {meta['name']} is not a sandbox pod"
    return None
