"""Fixtures every cluster tier shares (integration, node, chaos): one control plane, one operator and one
broker per session, from tests/cluster_fixtures.py. The unit tier requests none of them."""

pytest_plugins = ["tests.cluster_fixtures"]
