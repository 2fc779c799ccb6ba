"""Fixtures every cluster tier shares (integration, node, chaos): one control plane, one operator and one
broker per session, from tests/support/fixtures.py. The unit tier requests none of them."""

pytest_plugins = ["tests.support.fixtures"]
