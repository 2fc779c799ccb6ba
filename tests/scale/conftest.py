"""The scale tier: the operator under an RL step's load on the local control plane (kwok nodes): a thousand
episodes at once across hosts with caps in force. Correctness only (no duplicate child, FIFO holds, nothing
left behind); how fast is the benchmarks' business (bench/episodes.py)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/scale/" in item.nodeid:
            item.add_marker(pytest.mark.scale)
