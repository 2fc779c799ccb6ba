"""docs/dashboard.json: generated from gymsandbox/dashboard.py, and every query names a metric the code
exports (the operator's or the broker's registry), so no panel stays empty because of a typo or a rename."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from gymsandbox.broker.telemetry import Telemetry
from gymsandbox.dashboard import render_dashboard
from gymsandbox.metrics import OperatorMetrics

DASHBOARD = Path(__file__).parents[2] / "docs" / "dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
METRIC = re.compile(r"\b((?:gymsandbox|process)_[a-z_]+)\b")


def exported(registry: CollectorRegistry) -> set[str]:
    """The sample names a scrape can hold, whether or not a labelled child exists yet."""
    return {f.name + s for f in registry.collect() for s in SUFFIXES.get(f.type, ("",))}


def queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def test_the_dashboard_file_is_the_generated_one() -> None:
    assert DASHBOARD.read_text() == render_dashboard(), "run `gymsandbox dashboard` (make crds)"


def test_every_panel_query_names_only_exported_metrics() -> None:
    names = exported(OperatorMetrics().registry) | exported(Telemetry().registry)
    used = set()
    for title, expr in queries():
        found = set(METRIC.findall(expr))
        assert found, (title, expr)
        assert found <= names, (title, found - names)
        used |= found
    # And the dashboard shows every family, not just some (the _bucket of a histogram stands for it).
    families = {n for n in names if n.startswith("gymsandbox_") and not n.endswith(("_count", "_sum"))}
    assert families - used == set()


def test_panels_tile_the_grid_without_overlap() -> None:
    board = json.loads(DASHBOARD.read_text())
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, panel["title"]
        cells |= mine
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
