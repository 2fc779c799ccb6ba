"""Kube.pages on a real API server: every item of a label-selected listing, a page at a time."""

from __future__ import annotations

import pytest
from kubernetes import client

from gymsandbox.kube.client import SECRET, Kube

pytestmark = pytest.mark.integration


def test_pages_hold_at_most_their_size_and_together_every_selected_item(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    for index in range(5):
        labels = {"paging": "in" if index < 4 else "out"}
        core.create_namespaced_secret(
            namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=f"paged-{index}", labels=labels))
        )
    pages = list(Kube(api_client).pages(SECRET, namespace, labels="paging=in", size=3))
    assert [len(page) for page in pages] == [3, 1]
    assert sorted(item["metadata"]["name"] for page in pages for item in page) == [
        f"paged-{index}" for index in range(4)
    ]
