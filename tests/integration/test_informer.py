"""The episodes' informer (kube/informer.py) on a real API server, watching labelled ConfigMaps: a
listing, then every change as it happens; a listing that no longer shows an object held is its deletion.
(The listing again when a watch's version is gone, 410, is the chaos tier's: test_control_plane_restart.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gymsandbox.kube.client import Kind, Kube
from gymsandbox.kube.informer import Informer
from gymsandbox.kube.store import Store

pytestmark = pytest.mark.integration

CONFIG_MAP = Kind("v1", "configmaps")


class Seen:
    """The events an informer hands on, kept in a store as the episodes' handlers keep theirs."""

    def __init__(self) -> None:
        self.store = Store()
        self.events: list[tuple[str | None, str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, type: str | None, body: dict[str, Any]) -> None:
        if type == "DELETED":
            self.store.remove(body)
        else:
            self.store.put(body)
        with self.lock:
            self.events.append((type, body["metadata"]["name"]))
            self.bodies.append(body)

    def wait_for(self, event: tuple[str | None, str], seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while event not in self.events:
            assert time.monotonic() < deadline, f"{event} not seen; seen {self.events}"
            time.sleep(0.05)


def make(core: client.CoreV1Api, namespace: str, name: str, watched: bool = True) -> None:
    labels = {"informed": "yes" if watched else "no"}
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels))
    )


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def informer(api_client: client.ApiClient, namespace: str, seen: Seen) -> Iterator[Informer]:
    watching = Informer(
        Kube(api_client),
        CONFIG_MAP,
        namespace,
        name="informed-config-maps",
        labels="informed=yes",
        store=seen.store,
        handle=seen,
    )
    yield watching
    watching.stop()


def test_a_listing_then_each_change_of_the_selected_objects_as_it_happens(
    informer: Informer, seen: Seen, core: client.CoreV1Api, namespace: str
) -> None:
    make(core, namespace, "listed")
    make(core, namespace, "ignored", watched=False)
    informer.list()
    assert seen.events == [(None, "listed")]
    informer.start()
    make(core, namespace, "made")
    seen.wait_for(("ADDED", "made"))
    core.patch_namespaced_config_map("made", namespace, {"data": {"k": "v"}})
    seen.wait_for(("MODIFIED", "made"))
    core.delete_namespaced_config_map("listed", namespace)
    seen.wait_for(("DELETED", "listed"))
    assert seen.store.get(namespace, "listed") is None
    assert seen.store.get(namespace, "made") is not None
    assert ("ADDED", "ignored") not in seen.events
    # What is handed on (and queued, in a burst) is what the store keeps: no managedFields.
    assert all("managedFields" not in body["metadata"] for body in seen.bodies)


def test_a_listing_reports_the_deletion_of_what_it_no_longer_shows_but_not_of_what_came_after_it_began(
    informer: Informer, seen: Seen, core: client.CoreV1Api, namespace: str
) -> None:
    make(core, namespace, "kept")
    make(core, namespace, "lost")
    informer.list()
    core.delete_namespaced_config_map("lost", namespace)  # while nothing watches
    newcomer = {"metadata": {"namespace": namespace, "name": "newcomer", "uid": "u", "resourceVersion": "1"}}
    real_list = informer.kube.listing

    def listing_meanwhile(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        seen.store.put(newcomer)  # a write's answer, put while the listing is under way
        yield from real_list(*args, **kwargs)

    informer.kube.listing = listing_meanwhile  # type: ignore[method-assign]
    time.sleep(0.01)
    informer.list()
    assert seen.events == [(None, "kept"), (None, "lost"), (None, "kept"), ("DELETED", "lost")]
    assert seen.store.get(namespace, "lost") is None
    assert seen.store.get(namespace, "newcomer") is not None
