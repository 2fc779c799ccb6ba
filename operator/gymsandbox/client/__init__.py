"""Evaluator SDK: wait for a GymHost and read why it failed; drive episodes through the broker
(sync or async).

The broker client needs only httpx and pydantic, so code inside a Gym host can import it without
FastAPI or the Kubernetes client; `wait_ready` and its errors (which use the Kubernetes client) are loaded
only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gymsandbox.client.broker import AsyncBrokerClient, BrokerClient, BrokerClientError

if TYPE_CHECKING:
    from gymsandbox.client.gymhost import GymHostFailedError, GymHostTimeoutError, wait_ready

__all__ = [
    "AsyncBrokerClient",
    "BrokerClient",
    "BrokerClientError",
    "GymHostFailedError",
    "GymHostTimeoutError",
    "wait_ready",
]

_KUBERNETES_SIDE = ("GymHostFailedError", "GymHostTimeoutError", "wait_ready")


def __getattr__(name: str) -> Any:
    if name in _KUBERNETES_SIDE:
        from gymsandbox.client import gymhost  # noqa: PLC0415 - on first use: it needs the Kubernetes client

        return getattr(gymhost, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
