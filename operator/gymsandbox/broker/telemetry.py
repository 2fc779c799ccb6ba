"""Metrics (Prometheus) and one structured log line per request. Neither ever sees a header, so no token
can reach them; paths are reported by route template, not as requested."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from fastapi import Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("gymsandbox.broker.access")


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gymsandbox_broker_requests",
            "Requests by route template, method and HTTP status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.exec_seconds = Histogram(
            "gymsandbox_broker_exec_duration_seconds",
            "Wall time of exec calls in sandboxes, by exit class",
            ["outcome"],
            registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )

    def observe_exec(self, exit_code: int, seconds: float) -> None:
        outcome = {0: "ok", -1: "deadline", -2: "unreachable"}.get(exit_code, "nonzero")
        self.exec_seconds.labels(outcome).observe(seconds)

    def exposition(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def middleware(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.monotonic()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        self.requests.labels(route, request.method, str(response.status_code)).inc()
        log.info(
            json.dumps(
                {
                    "route": route,
                    "method": request.method,
                    "status": response.status_code,
                    "episode": request.path_params.get("episode_id"),
                    "seconds": round(time.monotonic() - started, 4),
                }
            )
        )
        return response
