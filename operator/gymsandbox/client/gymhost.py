"""Wait for a GymHost to become Ready; fail fast, with its reason, when the operator reports a failure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.conditions import ConditionType
from gymsandbox.api.names import GROUP, VERSION

POLL_SECONDS = 0.5


class GymHostFailedError(Exception):
    """The host cannot become Ready as it stands: refused, expired, or failed (as the operator classified)."""

    def __init__(self, name: str, reason: str, message: str, kind: str | None = None) -> None:
        super().__init__(f"gymhost {name} is not Ready: {reason}: {message}")
        self.name, self.reason, self.message, self.kind = name, reason, message, kind


class GymHostTimeoutError(TimeoutError):
    """Still not Ready at the deadline; carries the last reason the operator gave."""

    def __init__(self, name: str, timeout: float, reason: str | None, message: str | None) -> None:
        super().__init__(f"gymhost {name} not Ready after {timeout:.0f} s (last reason: {reason}: {message})")
        self.name, self.reason, self.message = name, reason, message


def _ready_condition(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == ConditionType.READY), {})


def verdict(obj: Mapping[str, Any]) -> str | None:
    """The endpoint when Ready for the current generation; None while waiting; raises when it failed."""
    name = obj["metadata"]["name"]
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return None  # the operator has not looked at this spec yet
    ready = _ready_condition(obj)
    if ready.get("status") == "True" and status.get("endpoint"):
        return str(status["endpoint"])
    failure = status.get("failure")
    if failure or ready.get("reason") == "Expired":
        failure = failure or {}
        raise GymHostFailedError(
            name, str(ready.get("reason")), str(ready.get("message", "")), failure.get("kind")
        )
    return None


def wait_ready(name: str, namespace: str, timeout: float = 300, api: client.ApiClient | None = None) -> str:
    """Block until gymhost `name` is Ready and return `status.endpoint`.

    Raises GymHostFailedError as soon as the operator reports a failure (refused spec, crash, pull error...),
    GymHostTimeoutError at the deadline, and ApiException for API errors other than a not-yet-created host.
    """
    custom = client.CustomObjectsApi(api or config.new_client_from_config())  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + timeout
    last: Mapping[str, Any] = {}
    while True:
        try:
            obj: Mapping[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, "gymhosts", name
            )
        except ApiException as e:
            if e.status != 404:
                raise
        else:
            last = _ready_condition(obj)
            endpoint = verdict(obj)
            if endpoint:
                return endpoint
        if time.monotonic() >= deadline:
            raise GymHostTimeoutError(name, timeout, last.get("reason"), last.get("message"))
        time.sleep(POLL_SECONDS)
