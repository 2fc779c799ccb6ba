"""Metrics (Prometheus, served apart from the API by `--metrics-listen`) and one structured log line per
request. Neither ever sees a header, so no token can reach them; paths are reported by route template, not as
requested, and no label holds a host or episode name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger("gymsandbox.broker.access")

EXEC_OUTCOMES = {0: "ok", -1: "deadline", -2: "unreachable"}


def exec_outcome(exit_code: int) -> str:
    """ok, deadline (-1: the timeout passed), unreachable (-2: the sandbox was not reached) or nonzero."""
    return EXEC_OUTCOMES.get(exit_code, "nonzero")


class Telemetry:
    def __init__(
        self, in_flight: Callable[[], float] = lambda: 0, reserved_bytes: Callable[[], float] = lambda: 0
    ) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "gymsandbox_broker_requests",
            "Requests by route template, method and HTTP status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            "gymsandbox_broker_request_duration_seconds",
            "Request latency by route template and method",
            ["route", "method"],
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.exec_seconds = Histogram(
            "gymsandbox_broker_exec_duration_seconds",
            "Wall time of exec calls in sandboxes, by outcome (ok, nonzero, deadline, unreachable)",
            ["outcome"],
            registry=registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.sandbox_bytes = Counter(
            "gymsandbox_broker_sandbox_bytes",
            "Bytes moved into and out of sandboxes, by call (exec, transfer) and direction (in, out)",
            ["call", "direction"],
            registry=registry,
        )
        self.auth_failures = Counter(
            "gymsandbox_broker_auth_failures",
            "Refused lease tokens by reason (missing_header, not_bearer, expired, bad_signature, ...)",
            ["reason"],
            registry=registry,
        )
        Gauge(
            "gymsandbox_broker_requests_in_flight", "Requests being served", registry=registry
        ).set_function(in_flight)
        Gauge(
            "gymsandbox_broker_reserved_bytes",
            "Memory reserved by calls in flight: upload bodies and output caps, at their worst case",
            registry=registry,
        ).set_function(reserved_bytes)

    def observe_exec(self, exit_code: int, seconds: float) -> None:
        self.exec_seconds.labels(exec_outcome(exit_code)).observe(seconds)

    def moved(self, call: str, sent: int, received: int) -> None:
        self.sandbox_bytes.labels(call, "in").inc(sent)
        self.sandbox_bytes.labels(call, "out").inc(received)

    def auth_failed(self, reason: str | None) -> None:
        self.auth_failures.labels(reason or "other").inc()

    def served(self, scope: Mapping[str, Any], status: int, seconds: float) -> None:
        """One request answered (`scope` as the router left it: the route template, the path's episode)."""
        route = getattr(scope.get("route"), "path", "unmatched")
        method = scope.get("method", "")
        self.requests.labels(route, method, str(status)).inc()
        self.request_seconds.labels(route, method).observe(seconds)
        log.info(
            json.dumps(
                {
                    "route": route,
                    "method": method,
                    "status": status,
                    "episode": (scope.get("path_params") or {}).get("episode_id"),
                    "seconds": round(seconds, 4),
                }
            )
        )
