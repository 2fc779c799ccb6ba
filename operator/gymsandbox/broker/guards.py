"""What keeps one host from harming the others through the broker: its share of calls in flight, and the
only pod it may exec into for an episode."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from gymsandbox.api.names import LABEL_COMPONENT
from gymsandbox.broker.auth import Caller
from gymsandbox.broker.errors import BrokerError
from gymsandbox.desired.labels import COMPONENT_EPISODE


class HostSlots:
    """Commands and transfers in flight per host, at most `limit` each: one host flooding the broker gets 429s
    while the others keep their share. Only hosts with a call in flight are kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_flight: dict[tuple[str, str], int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, caller: Caller) -> AsyncIterator[None]:
        key = (caller.namespace, caller.host_name())
        held = self._in_flight.get(key, 0)
        if held >= self.limit:
            raise BrokerError(
                "quota_exceeded",
                f"the host has {held} commands and transfers in flight, the cap; retry when one ends",
                retry_after=1,
            )
        self._in_flight[key] = held + 1
        try:
            yield
        finally:
            remaining = self._in_flight[key] - 1
            if remaining:
                self._in_flight[key] = remaining
            else:
                del self._in_flight[key]


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
