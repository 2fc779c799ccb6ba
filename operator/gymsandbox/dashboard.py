"""The Grafana dashboard (docs/dashboard.json), generated from the panels below: `gymsandbox dashboard`.

Every query names metrics this package exports (gymsandbox/metrics.py, broker/telemetry.py);
tests/unit/test_dashboard.py fails when one does not, or when the file drifts from this definition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

RATE = "$__rate_interval"  # Grafana's window for rate(): at least four scrape intervals
# Rare events (failures, errors, restarts) are shown as totals since the process started: increase() misses
# a labelled counter's first step, the one that creates its series, which for a rare event is all of them.
NAMESPACE = '{namespace=~"$namespace"}'


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str  # Grafana's unit id
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    description: str = ""


def quantiles(
    metric: str, by: str = "", selector: str = "", qs: tuple[float, ...] = (0.5, 0.95)
) -> tuple[tuple[str, str], ...]:
    """p50/p95 of a histogram, optionally per label `by`."""
    group = f"le, {by}" if by else "le"
    per = f" {{{{{by}}}}}" if by else ""  # Grafana's legend template: {{label}}
    return tuple(
        (
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{selector}[{RATE}])))",
            f"p{round(q * 100)}{per}",
        )
        for q in qs
    )


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Episodes",
        (
            Panel(
                "Episodes by phase",
                "short",
                (("sum by (phase) (gymsandbox_episodes" + NAMESPACE + ")", "{{phase}}"),),
            ),
            Panel(
                "Queue depth",
                "short",
                (
                    (
                        'sum by (namespace) (gymsandbox_episodes{phase="queued", namespace=~"$namespace"})',
                        "{{namespace}}",
                    ),
                ),
                "Episodes waiting for a concurrency slot of their host",
            ),
            Panel(
                "Hosts by phase",
                "short",
                (("sum by (phase) (gymsandbox_gymhosts" + NAMESPACE + ")", "{{phase}}"),),
            ),
            Panel("Admission latency", "s", quantiles("gymsandbox_episode_admission_seconds")),
            Panel(
                "Ready latency",
                "s",
                quantiles("gymsandbox_ready_seconds", "resource"),
                "From creation to the first Ready=True, episodes and hosts",
            ),
            Panel("Queue wait", "s", quantiles("gymsandbox_episode_queue_wait_seconds")),
            Panel(
                "Failures by kind and reason (total)",
                "short",
                (
                    (
                        "sum by (kind, reason) (gymsandbox_failures_total)",
                        "{{kind}} {{reason}}",
                    ),
                ),
                "Transitions into a failure, refusals (Policy) included",
            ),
            Panel(
                "Reaps",
                "short",
                (
                    (
                        f"sum by (resource, reason) (increase(gymsandbox_reaps_total[{RATE}]))",
                        "{{resource}} {{reason}}",
                    ),
                ),
                "Objects deleted at expiry",
            ),
            Panel(
                "Reap lag",
                "s",
                quantiles("gymsandbox_reap_lag_seconds", "resource", qs=(0.95,)),
                "How long after expiresAt expired objects were deleted",
            ),
        ),
    ),
    (
        "Operator",
        (
            Panel(
                "API requests by verb",
                "reqps",
                (
                    (f"sum by (verb) (rate(gymsandbox_api_requests_total[{RATE}]))", "{{verb}}"),
                    (
                        f'sum by (code) (rate(gymsandbox_api_requests_total{{code!~"2.."}}[{RATE}]))',
                        "not 2xx: {{code}}",
                    ),
                ),
            ),
            Panel(
                "API latency by verb",
                "s",
                quantiles("gymsandbox_api_request_duration_seconds", "verb", qs=(0.95,)),
            ),
            Panel(
                "Reconcile duration by handler",
                "s",
                quantiles("gymsandbox_reconcile_duration_seconds", "handler", qs=(0.95,)),
            ),
            Panel(
                "Handlers in flight, and errors (total)",
                "short",
                (
                    ("sum by (handler) (gymsandbox_reconciles_in_flight)", "in flight {{handler}}"),
                    (
                        "sum by (handler) (gymsandbox_reconcile_errors_total)",
                        "errors {{handler}}",
                    ),
                ),
                "Near the operator's 32 workers in flight means a backlog",
            ),
            Panel(
                "Memory (RSS) of the operator and each broker",
                "bytes",
                (("process_resident_memory_bytes", "{{instance}}"),),
            ),
            Panel(
                "Watch restarts (total)",
                "short",
                (("sum by (cause) (gymsandbox_watch_restarts_total)", "{{cause}}"),),
            ),
        ),
    ),
    (
        "Broker",
        (
            Panel(
                "Exec latency by outcome",
                "s",
                quantiles("gymsandbox_broker_exec_duration_seconds", "outcome"),
            ),
            Panel(
                "Exec outcomes",
                "ops",
                (
                    (
                        f"sum by (outcome) (rate(gymsandbox_broker_exec_duration_seconds_count[{RATE}]))",
                        "{{outcome}}",
                    ),
                ),
                "ok, nonzero exit, deadline (-1), unreachable (-2)",
            ),
            Panel(
                "Requests by status",
                "reqps",
                ((f"sum by (status) (rate(gymsandbox_broker_requests_total[{RATE}]))", "{{status}}"),),
            ),
            Panel(
                "Request latency by route",
                "s",
                quantiles("gymsandbox_broker_request_duration_seconds", "route", qs=(0.95,)),
            ),
            Panel(
                "Bytes to and from sandboxes",
                "Bps",
                (
                    (
                        f"sum by (call, direction) (rate(gymsandbox_broker_sandbox_bytes_total[{RATE}]))",
                        "{{call}} {{direction}}",
                    ),
                ),
            ),
            Panel(
                "Auth failures (total) and requests in flight",
                "short",
                (
                    (
                        "sum by (reason) (gymsandbox_broker_auth_failures_total)",
                        "refused: {{reason}}",
                    ),
                    ("sum(gymsandbox_broker_requests_in_flight)", "in flight"),
                ),
            ),
            Panel(
                "Memory reserved by calls in flight",
                "bytes",
                (("max by (instance) (gymsandbox_broker_reserved_bytes)", "{{instance}}"),),
                "upload bodies and output caps at their worst case; 320 MiB per replica at most",
            ),
        ),
    ),
)

WIDTH, HEIGHT = 8, 8  # each panel a third of Grafana's 24-column grid


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, row_panels in ROWS:
        panels.append(
            {"id": len(panels) + 1, "type": "row", "title": row_title, "collapsed": False, "panels": [],
             "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}
        )  # fmt: skip
        y += 1
        for i, panel in enumerate(row_panels):
            if i and i % 3 == 0:
                y += HEIGHT
            panels.append(_panel(panel, len(panels) + 1, (i % 3) * WIDTH, y))
        y += HEIGHT
    variable = {"type": "prometheus", "uid": "${datasource}"}
    return {
        "title": "gymsandbox",
        "uid": "gymsandbox",
        "description": "Episodes, hosts, the operator and the episode broker (see docs/observability.md)",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "tags": ["gymsandbox"],
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                {
                    "name": "namespace",
                    "type": "query",
                    "datasource": variable,
                    "query": {"query": "label_values(gymsandbox_episodes, namespace)", "refId": "namespaces"},
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def render_dashboard() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"
